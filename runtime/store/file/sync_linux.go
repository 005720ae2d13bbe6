//go:build linux

package file

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// fdatasync makes f's data, and the metadata needed to read it back, durable.
func fdatasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}

// syncfs makes everything written to the file system that holds d durable, in
// one call. errors.Is(err, errNoSyncfs) when the kernel lacks syncfs(2).
func syncfs(d *os.File) error {
	for {
		err := unix.Syncfs(int(d.Fd()))
		switch {
		case err == nil:
			return nil
		case err == unix.EINTR:
			continue
		case err == unix.ENOSYS:
			return errNoSyncfs
		default:
			return &os.PathError{Op: "syncfs", Path: d.Name(), Err: err}
		}
	}
}

var errNoSyncfs = errors.New("syncfs(2) not supported")

// syncfsTrusted reports whether d is on a file system whose syncfs(2) is known
// to write back and flush everything (ext2/3/4, XFS, Btrfs; tmpfs, where there
// is nothing to flush). Elsewhere (FUSE before Linux 5.15, network file
// systems) syncfs may return without making the data durable, so the default
// mode syncs each file instead.
func syncfsTrusted(d *os.File) bool {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(d.Fd()), &st); err != nil {
		return false
	}
	switch uint32(st.Type) {
	case unix.EXT4_SUPER_MAGIC, unix.XFS_SUPER_MAGIC, unix.BTRFS_SUPER_MAGIC, unix.TMPFS_MAGIC:
		return true
	}
	return false
}

// allocate makes f at least off+n bytes long, the new bytes zero and their
// blocks allocated, so that writes into them change no size (see the
// journal's zero tail). Where the file system has no fallocate(2) it writes
// the zeros.
func allocate(f *os.File, off, n int64) error {
	for {
		err := unix.Fallocate(int(f.Fd()), 0, off, n)
		switch {
		case err == nil:
			return nil
		case err == unix.EINTR:
			continue
		case err == unix.EOPNOTSUPP || err == unix.ENOSYS:
			return writeZeros(f, off, n)
		default:
			return &os.PathError{Op: "fallocate", Path: f.Name(), Err: err}
		}
	}
}

// syncDir makes d's entries durable.
func syncDir(d *os.File) error { return d.Sync() }
