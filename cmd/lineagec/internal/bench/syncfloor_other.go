//go:build !linux

package bench

import "os"

// fdatasync is fsync outside Linux, as the file store's commit does there.
func fdatasync(f *os.File) error { return f.Sync() }
