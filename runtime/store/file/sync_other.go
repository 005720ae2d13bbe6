//go:build !linux

package file

import (
	"errors"
	"os"
	"runtime"
)

// fdatasync makes f durable; outside Linux, with fsync.
func fdatasync(f *os.File) error { return f.Sync() }

// allocate makes f at least off+n bytes long, the new bytes zero (see the
// journal's zero tail); outside Linux, by writing them.
func allocate(f *os.File, off, n int64) error { return writeZeros(f, off, n) }

// syncfs is Linux only; elsewhere the store syncs each file.
func syncfs(*os.File) error { return errNoSyncfs }

var errNoSyncfs = errors.New("syncfs(2) not supported")

func syncfsTrusted(*os.File) bool { return false }

// syncDir makes d's entries durable. Windows cannot sync a directory handle;
// NTFS journals its metadata.
func syncDir(d *os.File) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	return d.Sync()
}
