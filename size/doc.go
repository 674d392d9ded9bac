// Package size parses and prints memory sizes the way people write them ("1.5GiB", "16GB",
// "1073741824"). It is a leaf package so that every other package, gpu/ included, can use it
// without crossing a seam.
package size
