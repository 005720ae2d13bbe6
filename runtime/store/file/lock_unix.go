//go:build unix

package file

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// lockDir takes the advisory lock that makes one Store the only writer of a
// directory: exclusive for a store that appends, shared for a read-only one.
// A held lock is ErrLocked at once, unless opts.WaitForLock: then it polls,
// calls opts.OnLockWait once with the holder, and gives up with ErrLocked
// after opts.LockTimeout (if set). The exclusive holder writes its pid and
// command into the lock file, for whoever waits (D43: lock waits say so).
func lockDir(path string, opts Options) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("store: lock %s: %w", path, err)
	}
	how := syscall.LOCK_EX
	if opts.ReadOnly {
		how = syscall.LOCK_SH
	}
	start := time.Now()
	delay := 2 * time.Millisecond
	told := false
	for {
		err = syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == syscall.EINTR {
			continue
		}
		if err != syscall.EWOULDBLOCK {
			break
		}
		holder := readHolder(f)
		if !opts.WaitForLock {
			f.Close()
			return nil, fmt.Errorf("%w: %s is locked by %s", ErrLocked, path, holder)
		}
		if opts.LockTimeout > 0 && time.Since(start) >= opts.LockTimeout {
			f.Close()
			return nil, fmt.Errorf("%w: %s is locked by %s; gave up after %v", ErrLocked, path, holder, opts.LockTimeout)
		}
		if !told && opts.OnLockWait != nil {
			opts.OnLockWait(holder)
			told = true
		}
		time.Sleep(delay)
		delay = min(2*delay, 100*time.Millisecond)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("store: lock %s: %w", path, err)
	}
	if !opts.ReadOnly {
		// Best effort: the note is for people, the lock is the flock.
		if f.Truncate(0) == nil {
			_, _ = f.WriteAt(holderNote(), 0)
		}
	}
	return f, nil
}

// unlockDir releases the lock; an exclusive holder first clears its note.
func unlockDir(f *os.File, shared bool) {
	if !shared {
		_ = f.Truncate(0)
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	f.Close()
}

// readHolder reads the lock file's note. A note whose process is gone is
// stale (the lock is then held by a reader, which writes none).
func readHolder(f *os.File) LockHolder {
	b := make([]byte, 4096)
	n, _ := f.ReadAt(b, 0)
	h := parseHolder(b[:n])
	if h.PID > 0 {
		if err := syscall.Kill(h.PID, 0); errors.Is(err, syscall.ESRCH) {
			return LockHolder{}
		}
	}
	return h
}

// LockHolderOf returns what the lock file of directory dir says of the
// process that holds it for writing, without taking the lock (the zero
// LockHolder if there is no note or its process is gone): for a caller that
// found the directory locked and would tell its user who holds it.
func LockHolderOf(dir string) LockHolder {
	f, err := os.Open(filepath.Join(dir, LockName))
	if err != nil {
		return LockHolder{}
	}
	defer f.Close()
	return readHolder(f)
}
