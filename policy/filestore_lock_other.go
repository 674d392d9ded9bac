//go:build !unix

package policy

// lockFile is a no-op where flock does not exist; the in-process mutex still serialises writers
// of one FileStore.
func lockFile(string) (func(), error) { return func() {}, nil }
