package mcpproxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/rogpeppe/go-internal/lockedfile"
)

// openCalls is the proxy's only durable state (decision D112): for one
// agent, the calls whose request is pending or approved but not yet
// forwarded, as call key → request id, in a JSON file replaced atomically
// (write, fsync, rename) under a lock file, so that proxies of the same agent
// on one machine, and a proxy after a restart, share it. A request is taken
// out of the file before it is forwarded; only the one who takes it out
// forwards it, which is what makes "forwarded at most once" hold.
type openCalls struct {
	path string
	mu   *lockedfile.Mutex
}

func newOpenCalls(dir, agent string) (*openCalls, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("mcpproxy: state directory: %w", err)
	}
	path := filepath.Join(dir, agent+".calls.json")
	o := &openCalls{path: path, mu: lockedfile.MutexAt(path + ".lock")}
	if _, err := o.read(); err != nil {
		return nil, err
	}
	return o, nil
}

// read returns the open calls; a missing file is none.
func (o *openCalls) read() (map[string]string, error) {
	b, err := os.ReadFile(o.path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("mcpproxy: reading %s: %w", o.path, err)
	}
	m := map[string]string{}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("mcpproxy: %s is not a JSON object of call keys to request ids: %w", o.path, err)
	}
	return m, nil
}

// lookup returns the open request of a call key, or "".
func (o *openCalls) lookup(key string) (string, error) {
	m, err := o.read()
	return m[key], err
}

// update applies change under the lock and writes the file if change says so.
func (o *openCalls) update(change func(m map[string]string) bool) error {
	unlock, err := o.mu.Lock()
	if err != nil {
		return fmt.Errorf("mcpproxy: locking %s: %w", o.path, err)
	}
	defer unlock()
	m, err := o.read()
	if err != nil {
		return err
	}
	if !change(m) {
		return nil
	}
	return o.write(m)
}

func (o *openCalls) write(m map[string]string) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(o.path), filepath.Base(o.path)+".*")
	if err != nil {
		return fmt.Errorf("mcpproxy: writing the open calls: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("mcpproxy: writing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("mcpproxy: syncing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), o.path); err != nil {
		return fmt.Errorf("mcpproxy: replacing %s: %w", o.path, err)
	}
	if d, err := os.Open(filepath.Dir(o.path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
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
