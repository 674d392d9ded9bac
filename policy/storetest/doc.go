// Package storetest holds the tests every policy.Store must pass, and helpers for testing policy
// watchers, shared by the policy package and the stores in its subpackages.
package storetest
