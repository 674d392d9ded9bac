// Package report draws a run's record.Result as report.html: one self-contained page with the
// run's figures, per GPU a chart of each job's used and reserved memory and the attempts'
// lanes, and the attempts table with links to logs and results. The page is an html/template
// (report.html.tmpl); the charts are SVG drawn in Go (svg.go). The page has no script.
package report
