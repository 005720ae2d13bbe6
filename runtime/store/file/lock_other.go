//go:build !unix

package file

import "os"

// lockDir is a no-op where flock(2) is not available: there, do not open one
// directory from two processes at the same time.
func lockDir(path string, opts Options) (*os.File, error) { return nil, nil }

func unlockDir(f *os.File, shared bool) {}

// LockHolderOf returns the zero LockHolder: without locks there are no notes.
func LockHolderOf(dir string) LockHolder { return LockHolder{} }
