module github.com/gpufrac/gpufrac

go 1.26
