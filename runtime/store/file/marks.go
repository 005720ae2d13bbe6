package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Mark is the size and head of the last checkpoint a node signed of an
// agent's log: the high-water below which the log may never go again
// (docs/history.md). Size 0 is no mark.
type Mark struct {
	Size uint64 `json:"size"`
	Head string `json:"head"`
}

// Shortfall says why a log of size records, whose record seq has the hash
// hashAt(seq), does not extend the mark; "" if it does, or if there is no
// mark. The server and the CLI's verify both judge a log by it.
func (m Mark) Shortfall(size uint64, hashAt func(seq uint64) string) string {
	switch {
	case m.Size == 0:
		return ""
	case size < m.Size:
		return fmt.Sprintf("the log has %d records, and a checkpoint of %d (head %s) was signed of it: records %d to %d were lost from the store",
			size, m.Size, m.Head, size, m.Size-1)
	case hashAt(m.Size-1) != m.Head:
		return fmt.Sprintf("record %d has hash %s, and a checkpoint of %d records with head %s was signed of it: the log was rewritten",
			m.Size-1, hashAt(m.Size-1), m.Size, m.Head)
	}
	return ""
}

// Marks keeps each agent's Mark across restarts. A store that can keep them
// implements it (the file store in its directory, PostgreSQL in a table
// every node shares); the server reads an agent's mark when it first meets
// the agent and raises it before it hands out a checkpoint it signed.
type Marks interface {
	// LoadMark returns agent's mark; the zero Mark if there is none.
	LoadMark(agent string) (Mark, error)
	// StoreMark raises agent's mark to m, durably, before it returns; a
	// mark of m.Size or more already kept stays (a mark never goes down).
	StoreMark(agent string, m Mark) error
}

var _ Marks = (*File)(nil)

// MarksDir is the directory, in a File store's, of the checkpoint marks: one
// small file per agent, <agent>.json (a leading dot: no agent id can take
// it; the temporary file of a write ends in .tmp, which no mark's name does).
const MarksDir = ".checkpoints"

// LoadMark implements Marks.
func (s *File) LoadMark(agent string) (Mark, error) {
	if err := checkAgent(agent); err != nil {
		return Mark{}, err
	}
	path := filepath.Join(s.dir, MarksDir, agent+".json")
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Mark{}, nil
	}
	if err != nil {
		return Mark{}, fmt.Errorf("store: %s: checkpoint mark: %w", agent, err)
	}
	var m Mark
	if err := json.Unmarshal(b, &m); err != nil || m.Size == 0 || !strings.HasPrefix(m.Head, "sha256:") {
		// A mark that cannot be read is not no mark: the node would sign
		// anything again. It is refused until an operator looks.
		return Mark{}, &DamageError{Agent: agent, Path: path, Offset: -1,
			Reason: fmt.Sprintf("the checkpoint mark cannot be read (%q): the size and head of the last checkpoint signed are unknown", b)}
	}
	return m, nil
}

// StoreMark implements Marks: the mark is written to a temporary file,
// synced, renamed over the agent's mark and the directory synced, so that a
// crash leaves the old mark or the new one whole (D253 (the signed size kept
// in the data directory)).
func (s *File) StoreMark(agent string, m Mark) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	if s.opts.ReadOnly {
		return fmt.Errorf("%w: checkpoint mark of %s in %s", ErrReadOnly, agent, s.dir)
	}
	if err := checkAgent(agent); err != nil {
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
func (s *File) openMarksDir(dir string) (*os.File, error) {
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
