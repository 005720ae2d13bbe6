//go:build !unix

package main

// lockFile is a no-op where flock(2) is not available: do not run two
// lineagec processes on one data directory at the same time there.
func lockFile(path string, exclusive bool) (func(), error) { return func() {}, nil }
