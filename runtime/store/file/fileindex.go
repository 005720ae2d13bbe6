package file

import (
	"fmt"
	"os"
	"path/filepath"

	gojson "github.com/goccy/go-json"
	"github.com/lineage-guard/lineage/runtime/internal/index"
	"github.com/lineage-guard/lineage/runtime/store"
)

// IndexName is the file in the store's directory that keeps the indexes
// (Lister) between runs. It is written when the store closes and is only a
// shortcut: at open a log whose size differs from the one the file noted is
// read again, and a missing or damaged file is rebuilt from the logs
// (docs/decisions.md: the index file is a cache of the logs).
const IndexName = ".index.json"

type indexFile struct {
	Version int `json:"version"`
	// Clean: written by Close, with nothing appended since.
	Clean bool `json:"clean"`
	index.Snapshot
}

const indexFileVersion = 1

// ListAgents implements store.Lister.
func (s *Store) ListAgents(q store.ListQuery) ([]store.AgentRow, string, error) {
	if err := s.enter(); err != nil {
		return nil, "", err
	}
	defer s.exit()
	return s.idx.ListAgents(q)
}

// ListPending implements store.Lister.
func (s *Store) ListPending(q store.ListQuery) ([]store.PendingRow, string, error) {
	if err := s.enter(); err != nil {
		return nil, "", err
	}
	defer s.exit()
	return s.idx.ListPending(q)
}

var _ store.Lister = (*Store)(nil)

// loadIndex reads the index file, if any, and brings it in line with the
// logs: a log whose size the file does not note is read again.
//
// A file written by a clean Close is trusted as it is, without a look at
// each log (a stat per log is most of the cost of opening a large store); a
// writer then renames it to IndexName+".open", so that after a crash the next
// open finds only that one and checks every log's size against it
// (docs/decisions.md: the index file trusted after a clean close).
func (s *Store) loadIndex(logs logDirs) *index.Index {
	x, clean := s.readIndexFile(IndexName)
	// A clean file is trusted only for the logs it names: one read of the
	// directory (names, no stat) finds a log put in or taken out behind the
	// store, which is then checked like after a crash, so that a listing
	// never leaves out a log that is there, damaged or not.
	if clean && !sameLogs(x, logs) {
		clean = false
	}
	if clean && len(s.damaged) == 0 && s.roJournal == nil {
		if !s.opts.ReadOnly {
			// Not clean any more once this store appends.
			// The rename must be durable before any append: a crash
			// must never bring the clean file back over grown logs.
			if os.Rename(filepath.Join(s.dir, IndexName), filepath.Join(s.dir, IndexName+".open")) != nil || syncDir(s.dirF) != nil {
				return s.checkIndex(x, logs)
			}
		}
		return x
	}
	if s.opts.ReadOnly {
		return s.checkIndex(x, logs)
	}
	if !clean {
		if y, _ := s.readIndexFile(IndexName + ".open"); y.Len() > 0 {
			x = y
		}
	}
	x = s.checkIndex(x, logs)
	// What a crash from here on leaves: checked against the logs at the
	// next open, not rebuilt from nothing.
	s.idx = x
	if x.Len() > 0 && s.writeIndex(IndexName+".open", false) == nil {
		os.Remove(filepath.Join(s.dir, IndexName))
	}
	return x
}

// checkIndex brings x in line with the logs: a log of a size x does not
// note is read again, and x forgets logs that are gone.
func (s *Store) checkIndex(x *index.Index, logs logDirs) *index.Index {
	sizes := s.logSizes(logs)
	for _, agent := range x.Agents() {
		if _, ok := sizes[agent]; !ok {
			x.Remove(agent)
		}
	}
	for agent, size := range sizes {
		if count, seen, ok := x.Seen(agent); ok && seen == size && count >= 0 {
			continue
		}
		if _, ok := s.damaged[agent]; !ok && size == 0 {
			x.Remove(agent)
			continue // an empty log: a create that never got its records (D41: crash-safe create)
		}
		s.indexLog(x, agent, size)
	}
	return x
}

// indexLog reads agent's log into x anew.
func (s *Store) indexLog(x *index.Index, agent string, size int64) {
	x.Reset(agent)
	err := s.scanForIndex(agent, func(seq uint64, rec []byte) error {
		x.Apply(agent, seq, size, [][]byte{rec})
		return nil
	})
	if err != nil {
		x.Damage(agent, err.Error())
	}
}

// scanForIndex reads agent's log without keeping a handle on it.
func (s *Store) scanForIndex(agent string, fn func(seq uint64, rec []byte) error) error {
	if _, ok := s.roJournal[agent]; ok {
		return s.Scan(agent, fn)
	}
	if err := s.damaged[agent]; err != nil {
		return err
	}
	path := s.Path(agent)
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("store: %s: %w", agent, err)
	}
	defer f.Close()
	_, err = scanLines(agent, path, f, -1, fn)
	return err
}

// sameLogs reports whether the directory holds exactly the logs x names
// (by name only: no stat per log).
func sameLogs(x *index.Index, logs logDirs) bool {
	if len(logs.logs) != x.Len() {
		return false
	}
	for id := range logs.logs {
		if _, _, ok := x.Seen(id); !ok {
			return false
		}
	}
	return true
}

// logSizes returns the size of every log of logs (a log gone since is left
// out).
func (s *Store) logSizes(logs logDirs) map[string]int64 {
	out := make(map[string]int64, len(logs.logs))
	for id, lf := range logs.logs {
		info, err := lf.ent.Info()
		if err != nil {
			continue
		}
		out[id] = info.Size()
	}
	for agent := range s.roJournal {
		out[agent] = -1 // always read again: the journal continues it
	}
	return out
}

func (s *Store) readIndexFile(name string) (*index.Index, bool) {
	b, err := os.ReadFile(filepath.Join(s.dir, name))
	if err != nil {
		return index.New(), false
	}
	var f indexFile
	// goccy/go-json (a drop-in for encoding/json, already the fold's)
	// reads the file of 100,000 agents several times faster.
	if gojson.Unmarshal(b, &f) != nil || f.Version != indexFileVersion {
		return index.New(), false // damaged or from elsewhere: rebuilt from the logs
	}
	x, ok := index.FromSnapshot(f.Snapshot)
	return x, ok && f.Clean
}

// saveIndex writes the index file (at Close): whole or not at all.
func (s *Store) saveIndex() error {
	if err := s.writeIndex(IndexName, true); err != nil {
		return err
	}
	os.Remove(filepath.Join(s.dir, IndexName+".open"))
	return nil
}

// writeIndex writes the indexes to name, by rename.
func (s *Store) writeIndex(name string, clean bool) error {
	f := indexFile{Version: indexFileVersion, Clean: clean, Snapshot: s.idx.Snapshot()}
	b, err := gojson.Marshal(f)
	if err != nil {
		return err
	}
	tmp := filepath.Join(s.dir, name+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("store: index: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, name)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("store: index: %w", err)
	}
	return nil
}

// CheckIndex reads every log again and compares what it finds with the
// indexes the store keeps; it returns one line per difference (`lineagec
// verify` reports them). Nothing decides from the index, so a difference is
// a bug or a change behind the store's back, never a wrong verdict.
func (s *Store) CheckIndex() ([]string, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	logs, err := listLogs(s.dir)
	if err != nil {
		return nil, err
	}
	sizes := s.logSizes(logs)
	fresh := index.New()
	for agent, size := range sizes {
		if size == 0 && !s.createdHere(agent) {
			continue
		}
		s.indexLog(fresh, agent, size)
	}
	return index.Diff(s.idx, fresh, ""), nil
}

var _ store.IndexChecker = (*Store)(nil)

// CheckIndexOf implements store.IndexChecker.
func (s *Store) CheckIndexOf(agent string) ([]string, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	if err := store.CheckAgent(agent); err != nil {
		return nil, err
	}
	fresh := index.New()
	if info, err := os.Stat(s.Path(agent)); err == nil && (info.Size() > 0 || s.createdHere(agent)) {
		s.indexLog(fresh, agent, info.Size())
	}
	return index.Diff(s.idx, fresh, agent), nil
}
