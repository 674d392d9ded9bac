//go:build cgo

package fence

// TokenHash is the C SHA-256 the table stores tokens as, for the tests of its implementation.
var TokenHash = tokenHash
