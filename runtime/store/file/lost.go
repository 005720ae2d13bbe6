package file

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/lineage-guard/lineage/runtime/store"
)

// LostDir is the directory, in the store's, of the notes Close leaves for
// logs it found shorter than what the store acknowledged (cut back or removed
// under it): <agent>.json, {"count","size"}. While a note stands, opening
// the store reports the log as damage from its first lost record, until the
// log holds what the note says again (put back from a backup) or an operator
// removes the note (D255 (a cut no copy holds is noted at Close)).
const LostDir = ".lost"

type lostNote struct {
	Count uint64 `json:"count"` // records the store acknowledged
	Size  int64  `json:"size"`  // their bytes
}

// noteIfShrunk, at Close, compares l's file, as the directory names it, with
// what the store acknowledged; a log found shorter (or gone) is noted in
// LostDir and returned as damage from its first lost record. The caller
// holds l.mu.
func (s *Store) noteIfShrunk(l *fileLog) error {
	if s.opts.ReadOnly || !l.known || l.count == 0 {
		return nil
	}
	st, err := os.Stat(l.path)
	if err == nil && st.Size() >= l.size {
		return nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("store: %s: %w", l.agent, err)
	}
	have, off := countRecords(l.agent, l.path)
	damage := &store.DamageError{Agent: l.agent, Path: l.path, Seq: have, Offset: off,
		Reason: fmt.Sprintf("the log was cut back under the store: it holds %d records, and the store acknowledged %d", have, l.count)}
	b, _ := json.Marshal(lostNote{Count: l.count, Size: l.size})
	if err := os.Mkdir(filepath.Join(s.dir, LostDir), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return errors.Join(damage, fmt.Errorf("store: %s: noting the lost records: %w", l.agent, err))
	}
	t, err := replaceFile(filepath.Join(s.dir, LostDir, l.agent+".json"), append(b, '\n'))
	if err == nil {
		t.Close()
		err = syncPath(filepath.Join(s.dir, LostDir))
	}
	if err == nil {
		err = syncDir(s.dirF)
	}
	if err != nil {
		return errors.Join(damage, fmt.Errorf("store: %s: noting the lost records: %w", l.agent, err))
	}
	return damage
}

// countRecords returns how many whole records the log at path holds, and
// the byte offset past them (0, 0 if it is missing).
func countRecords(agent, path string) (uint64, int64) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	res, err := scanLines(agent, path, f, -1, nil)
	var damage *store.DamageError
	if errors.As(err, &damage) {
		return damage.Seq, damage.Offset
	}
	return res.count, res.good
}

func syncPath(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return syncDir(d)
}

// readLost returns the damage of every log a note in LostDir says lost
// records that it still lacks; a writable store removes the notes of logs
// that hold their records again.
func (s *Store) readLost() (map[string]error, error) {
	ents, err := os.ReadDir(filepath.Join(s.dir, LostDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", LostDir, err)
	}
	out := map[string]error{}
	for _, e := range ents {
		agent, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || store.CheckAgent(agent) != nil {
			continue // a temporary file a crash left
		}
		notePath := filepath.Join(s.dir, LostDir, e.Name())
		b, err := os.ReadFile(notePath)
		if err != nil {
			return nil, fmt.Errorf("store: %s: %w", notePath, err)
		}
		var n lostNote
		path := s.Path(agent)
		if err := json.Unmarshal(b, &n); err != nil || n.Count == 0 {
			out[agent] = &store.DamageError{Agent: agent, Path: path, Offset: -1,
				Reason: fmt.Sprintf("the note of records this log lost (%s) cannot be read: %q", notePath, b)}
			continue
		}
		have, off := countRecords(agent, path)
		if st, err := os.Stat(path); err == nil && have >= n.Count && st.Size() >= n.Size {
			if !s.opts.ReadOnly {
				if err := os.Remove(notePath); err != nil {
					return nil, fmt.Errorf("store: %w", err)
				}
			}
			continue
		}
		out[agent] = &store.DamageError{Agent: agent, Path: path, Seq: have, Offset: off,
			Reason: fmt.Sprintf("records %d to %d are lost: the log was cut back under the store, which had acknowledged %d records, and no copy holds them (put the log back from a backup, or remove %s to accept the loss)",
				have, n.Count-1, n.Count, notePath)}
	}
	return out, nil
}
