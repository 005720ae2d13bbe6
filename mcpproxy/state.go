package mcpproxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rogpeppe/go-internal/lockedfile"

	"github.com/lineage-guard/lineage/internal/strictjson"
)

// openCalls is the proxy's only durable state (decision D112 (at most once)): for one
// agent, the calls whose request is pending or approved but not yet
// forwarded, as call key → request id, in a JSON file replaced atomically
// (write, fsync, rename) under a lock file, so that proxies of the same agent
// on one machine, and a proxy after a restart, share it. A request is taken
// out of the file before it is forwarded; only the one who takes it out
// forwards it, which is what makes "forwarded at most once" hold.
//
// The file as last read or written is kept in memory (decision D161 (the open calls in memory)): a
// lookup stats the file and reads it again only when it may not be that
// version any more. The file is only ever replaced, never written in place,
// so another version is another file (inode), size or modification time,
// unless it reuses a freed inode and has the same size and a modification
// time in the same clock tick: so a version is trusted by its stat only once
// it was seen racyWindow after it was written (git's "racy clean" rule).
// Every change reads the file afresh under the lock, so at most once never
// rests on the copy in memory.
type openCalls struct {
	path string
	mu   *lockedfile.Mutex

	cacheMu sync.Mutex
	loaded  bool
	m       map[string]string // read-only once cached
	fi      fs.FileInfo       // the version m is; nil: there was no file
	seen    time.Time         // every later version was written after it
}

// racyWindow is how long after its modification time a version of the file
// must have been seen for its stat to tell it from later versions: more than
// a clock tick of any file system's timestamps (FAT's are 2 s).
const racyWindow = 2 * time.Second

func newOpenCalls(dir, agent string) (*openCalls, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("mcpproxy: state directory: %w", err)
	}
	path := filepath.Join(dir, agent+".calls.json")
	o := &openCalls{path: path, mu: lockedfile.MutexAt(path + ".lock")}
	m, fi, seen, err := o.read()
	if err != nil {
		return nil, err
	}
	o.keep(m, fi, seen)
	return o, nil
}

// read returns the open calls, the version of the file they were read from
// (a missing file is none, and a nil version) and a time before which no
// later version was written.
func (o *openCalls) read() (map[string]string, fs.FileInfo, time.Time, error) {
	seen := time.Now()
	f, err := os.Open(o.path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, nil, seen, nil
	}
	if err != nil {
		return nil, nil, seen, fmt.Errorf("mcpproxy: reading %s: %w", o.path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, seen, fmt.Errorf("mcpproxy: reading %s: %w", o.path, err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, nil, seen, fmt.Errorf("mcpproxy: reading %s: %w", o.path, err)
	}
	m := map[string]string{}
	if err := strictjson.Unmarshal(b, &m, 0); err != nil {
		return nil, nil, seen, fmt.Errorf("mcpproxy: %s is not a JSON object of call keys to request ids: %w", o.path, err)
	}
	return m, fi, seen, nil
}

// keep makes m, read from or written as version fi, the copy in memory.
func (o *openCalls) keep(m map[string]string, fi fs.FileInfo, seen time.Time) {
	o.cacheMu.Lock()
	defer o.cacheMu.Unlock()
	o.loaded, o.m, o.fi, o.seen = true, m, fi, seen
}

// sameVersion says whether the file as stat'ed now (nil: missing) is the one
// kept in memory. Call with cacheMu held.
func (o *openCalls) sameVersion(now fs.FileInfo) bool {
	switch {
	case !o.loaded:
		return false
	case now == nil || o.fi == nil:
		return now == nil && o.fi == nil
	}
	return os.SameFile(now, o.fi) && now.Size() == o.fi.Size() && now.ModTime().Equal(o.fi.ModTime()) &&
		o.seen.Sub(o.fi.ModTime()) >= racyWindow
}

// lookup returns the open request of a call key, or "".
func (o *openCalls) lookup(key string) (string, error) {
	now, err := os.Stat(o.path)
	if errors.Is(err, fs.ErrNotExist) {
		now, err = nil, nil
	}
	if err != nil {
		return "", fmt.Errorf("mcpproxy: reading %s: %w", o.path, err)
	}
	o.cacheMu.Lock()
	defer o.cacheMu.Unlock()
	if !o.sameVersion(now) {
		m, fi, seen, err := o.read()
		if err != nil {
			return "", err
		}
		o.loaded, o.m, o.fi, o.seen = true, m, fi, seen
	}
	return o.m[key], nil
}

// update applies change under the lock to the file as it is now, and writes
// it if change says so.
func (o *openCalls) update(change func(m map[string]string) bool) error {
	unlock, err := o.mu.Lock()
	if err != nil {
		return fmt.Errorf("mcpproxy: locking %s: %w", o.path, err)
	}
	defer unlock()
	m, fi, seen, err := o.read()
	if err != nil {
		return err
	}
	if change(m) {
		if fi, seen, err = o.write(m); err != nil {
			return err
		}
	}
	o.keep(m, fi, seen)
	return nil
}

// write replaces the file by m and returns the new file's version and a
// time before which no later version was written.
func (o *openCalls) write(m map[string]string) (fs.FileInfo, time.Time, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, time.Time{}, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(o.path), filepath.Base(o.path)+".*")
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("mcpproxy: writing the open calls: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return nil, time.Time{}, fmt.Errorf("mcpproxy: writing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, time.Time{}, fmt.Errorf("mcpproxy: syncing %s: %w", tmp.Name(), err)
	}
	// Renaming keeps the file's inode, size and modification time.
	fi, err := tmp.Stat()
	if err != nil {
		tmp.Close()
		return nil, time.Time{}, fmt.Errorf("mcpproxy: writing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return nil, time.Time{}, err
	}
	seen := time.Now()
	if err := os.Rename(tmp.Name(), o.path); err != nil {
		return nil, time.Time{}, fmt.Errorf("mcpproxy: replacing %s: %w", o.path, err)
	}
	if d, err := os.Open(filepath.Dir(o.path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return fi, seen, nil
}

// open records id as the open request of key.
func (o *openCalls) open(key, id string) error {
	return o.update(func(m map[string]string) bool {
		if m[key] == id {
			return false
		}
		m[key] = id
		return true
	})
}

// drop forgets key's request id if it is still id (a denied or rejected request).
func (o *openCalls) drop(key, id string) error {
	return o.update(func(m map[string]string) bool {
		if m[key] != id {
			return false
		}
		delete(m, key)
		return true
	})
}

// claim takes id out of the file durably and reports whether this caller
// took it (and so may forward it). It takes it even when the file does not
// hold it: then nobody recorded it as open, and it was decided allow at once.
func (o *openCalls) claim(key, id string, recorded bool) (bool, error) {
	if !recorded {
		return true, nil
	}
	took := false
	err := o.update(func(m map[string]string) bool {
		if m[key] != id {
			return false
		}
		delete(m, key)
		took = true
		return true
	})
	if err != nil {
		return false, err
	}
	return took, nil
}
