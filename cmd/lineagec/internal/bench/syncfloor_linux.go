//go:build linux

package bench

import (
	"os"

	"golang.org/x/sys/unix"
)

// fdatasync is fdatasync(2), the call the file store's commit makes.
func fdatasync(f *os.File) error {
	for {
		if err := unix.Fdatasync(int(f.Fd())); err != unix.EINTR {
			return err
		}
	}
}
