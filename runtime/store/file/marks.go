package file

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/lineage-guard/lineage/runtime/store"
)

var _ store.Marks = (*Store)(nil)

// MarksDir is the directory, in the store's, of the checkpoint marks: one
// small file per agent, <agent>.json (a leading dot: no agent id can take
// it; the temporary file of a write ends in .tmp, which no mark's name does).
const MarksDir = ".checkpoints"

// LoadMark implements store.Marks.
func (s *Store) LoadMark(agent string) (store.Mark, error) {
	if err := store.CheckAgent(agent); err != nil {
		return store.Mark{}, err
	}
	path := filepath.Join(s.dir, MarksDir, agent+".json")
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return store.Mark{}, nil
	}
	if err != nil {
		return store.Mark{}, fmt.Errorf("store: %s: checkpoint mark: %w", agent, err)
	}
	var m store.Mark
	if err := json.Unmarshal(b, &m); err != nil || m.Size == 0 || !strings.HasPrefix(m.Head, "sha256:") {
		// A mark that cannot be read is not no mark: the node would sign
		// anything again. It is refused until an operator looks.
		return store.Mark{}, &store.DamageError{Agent: agent, Path: path, Offset: -1,
			Reason: fmt.Sprintf("the checkpoint mark cannot be read (%q): the size and head of the last checkpoint signed are unknown", b)}
	}
	return m, nil
}

// StoreMark implements store.Marks: the mark is written to a temporary file,
// synced, renamed over the agent's mark and the directory synced, so that a
// crash leaves the old mark or the new one whole (D253 (the signed size kept
// in the data directory)).
func (s *Store) StoreMark(agent string, m store.Mark) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	if s.opts.ReadOnly {
		return fmt.Errorf("%w: checkpoint mark of %s in %s", store.ErrReadOnly, agent, s.dir)
	}
	if err := store.CheckAgent(agent); err != nil {
		return err
	}
	// One writer an agent; agents' marks are synced in parallel.
	v, _ := s.markLocks.LoadOrStore(agent, new(sync.Mutex))
	mu := v.(*sync.Mutex)
	mu.Lock()
	defer mu.Unlock()
	old, err := s.LoadMark(agent)
	if err != nil {
		return err
	}
	if old.Size >= m.Size {
		return nil
	}
	dir := filepath.Join(s.dir, MarksDir)
	marksDir, err := s.openMarksDir(dir)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(m)
	path := filepath.Join(dir, agent+".json")
	t, err := replaceFile(path, append(b, '\n'))
	if err == nil {
		t.Close()
		err = syncDir(marksDir)
	}
	if err != nil {
		return fmt.Errorf("store: %s: checkpoint mark: %w", agent, err)
	}
	return nil
}

// openMarksDir makes MarksDir, durably, the first time, and returns it open.
func (s *Store) openMarksDir(dir string) (*os.File, error) {
	s.marksMu.Lock()
	defer s.marksMu.Unlock()
	if s.marksDir != nil {
		return s.marksDir, nil
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("store: checkpoint marks: %w", err)
	}
	if err := syncDir(s.dirF); err != nil {
		return nil, fmt.Errorf("store: checkpoint marks: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("store: checkpoint marks: %w", err)
	}
	s.marksDir = d
	return d, nil
}
