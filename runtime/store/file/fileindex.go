package store

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	gojson "github.com/goccy/go-json"
)

// IndexName is the file in a File store's directory that keeps the indexes
// (Lister) between runs. It is written when the store closes and is only a
// shortcut: at open a log whose size differs from the one the file noted is
// read again, and a missing or damaged file is rebuilt from the logs
// (docs/decisions.md: the index file is a cache of the logs).
const IndexName = ".index.json"

type indexFile struct {
	Version int `json:"version"`
	// Clean: written by Close, with nothing appended since.
	Clean   bool              `json:"clean"`
	Agents  []indexFileRow    `json:"agents"`
	Costs   map[string]*Costs `json:"costs"`
	Pending []PendingRow      `json:"pending"`
}

type indexFileRow struct {
	AgentRow
	Count int64 `json:"count"`
	Size  int64 `json:"size"`
}

const indexFileVersion = 1

// ListAgents implements Lister.
func (s *File) ListAgents(q ListQuery) ([]AgentRow, string, error) {
	if err := s.enter(); err != nil {
		return nil, "", err
	}
	defer s.exit()
	return s.idx.listAgents(q)
}

// ListPending implements Lister.
func (s *File) ListPending(q ListQuery) ([]PendingRow, string, error) {
	if err := s.enter(); err != nil {
		return nil, "", err
	}
	defer s.exit()
	return s.idx.listPending(q)
}

var _ Lister = (*File)(nil)

// loadIndex reads the index file, if any, and brings it in line with the
// logs: a log whose size the file does not note is read again.
//
// A file written by a clean Close is trusted as it is, without a look at
// each log (a stat per log is most of the cost of opening a large store); a
// writer then renames it to IndexName+".open", so that after a crash the next
// open finds only that one and checks every log's size against it
// (docs/decisions.md: the index file trusted after a clean close).
func (s *File) loadIndex() *index {
	x, clean := s.readIndexFile(IndexName)
	// A clean file is trusted only for the logs it names: one read of the
	// directory (names, no stat) finds a log put in or taken out behind the
	// store, which is then checked like after a crash, so that a listing
	// never leaves out a log that is there, damaged or not.
	if clean && !s.sameLogs(x) {
		clean = false
	}
	if clean && len(s.damaged) == 0 && s.roJournal == nil {
		if !s.opts.ReadOnly {
			// Not clean any more once this store appends.
			// The rename must be durable before any append: a crash
			// must never bring the clean file back over grown logs.
			if os.Rename(filepath.Join(s.dir, IndexName), filepath.Join(s.dir, IndexName+".open")) != nil || syncDir(s.dirF) != nil {
				return s.checkIndex(x)
			}
		}
		return x
	}
	if s.opts.ReadOnly {
		return s.checkIndex(x)
	}
	if !clean {
		if y, _ := s.readIndexFile(IndexName + ".open"); len(y.rows) > 0 {
			x = y
		}
	}
	x = s.checkIndex(x)
	// What a crash from here on leaves: checked against the logs at the
	// next open, not rebuilt from nothing.
	s.idx = x
	if len(x.rows) > 0 && s.writeIndex(IndexName+".open", false) == nil {
		os.Remove(filepath.Join(s.dir, IndexName))
	}
	return x
}

// checkIndex brings x in line with the logs: a log of a size x does not
// note is read again, and x forgets logs that are gone.
func (s *File) checkIndex(x *index) *index {
	sizes, err := s.logSizes()
	if err != nil {
		// Listing the directory failed: every later list would too; start
		// from what the file says.
		return x
	}
	for agent := range x.rows {
		if _, ok := sizes[agent]; !ok {
			x.remove(agent)
		}
	}
	for agent, size := range sizes {
		if r := x.rows[agent]; r != nil && r.size == size && r.count >= 0 {
			continue
		}
		if _, ok := s.damaged[agent]; !ok && size == 0 {
			if r := x.rows[agent]; r != nil {
				x.remove(agent)
			}
			continue // an empty log: a create that never got its records (D41)
		}
		s.indexLog(x, agent, size)
	}
	return x
}

// indexLog reads agent's log into x anew.
func (s *File) indexLog(x *index, agent string, size int64) {
	x.reset(agent)
	err := s.scanForIndex(agent, func(seq uint64, rec []byte) error {
		x.apply(agent, seq, size, [][]byte{rec})
		return nil
	})
	if err != nil {
		x.mu.Lock()
		x.damage(x.row(agent), err.Error())
		x.mu.Unlock()
	}
}

// scanForIndex reads agent's log without keeping a handle on it.
func (s *File) scanForIndex(agent string, fn func(seq uint64, rec []byte) error) error {
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
// (by name only: a read of the directory, no stat per log).
func (s *File) sameLogs(x *index) bool {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return false
	}
	n := 0
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), Ext)
		if !ok || checkAgent(id) != nil {
			continue
		}
		if _, ok := x.rows[id]; !ok {
			return false
		}
		n++
	}
	return n == len(x.rows)
}

// logSizes returns the size of every log in the directory.
func (s *File) logSizes() (map[string]int64, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(ents))
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), Ext)
		if !ok || checkAgent(id) != nil {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		out[id] = info.Size()
	}
	for agent := range s.roJournal {
		out[agent] = -1 // always read again: the journal continues it
	}
	return out, nil
}

func (s *File) readIndexFile(name string) (*index, bool) {
	x := newIndex()
	b, err := os.ReadFile(filepath.Join(s.dir, name))
	if err != nil {
		return x, false
	}
	var f indexFile
	// goccy/go-json (a drop-in for encoding/json, already the fold's)
	// reads the file of 100,000 agents several times faster.
	if gojson.Unmarshal(b, &f) != nil || f.Version != indexFileVersion {
		return x, false // damaged or from elsewhere: rebuilt from the logs
	}
	for _, r := range f.Agents {
		if checkAgent(r.Agent) != nil {
			return newIndex(), false
		}
		row := x.row(r.Agent)
		row.AgentRow, row.count, row.size = r.AgentRow, r.Count, r.Size
	}
	for d, c := range f.Costs {
		if c != nil {
			x.costs[d] = c
		}
	}
	for i := range f.Pending {
		p := f.Pending[i]
		r := x.rows[p.Agent]
		if r == nil {
			return newIndex(), false
		}
		key := PendingKey(p.Agent, p.Seq)
		x.pending[key] = &p
		if r.reqs == nil {
			r.reqs = map[string]string{}
		}
		r.reqs[p.RequestID] = key
	}
	return x, f.Clean
}

// saveIndex writes the index file (at Close): whole or not at all.
func (s *File) saveIndex() error {
	if err := s.writeIndex(IndexName, true); err != nil {
		return err
	}
	os.Remove(filepath.Join(s.dir, IndexName+".open"))
	return nil
}

// writeIndex writes the indexes to name, by rename.
func (s *File) writeIndex(name string, clean bool) error {
	x := s.idx
	x.mu.Lock()
	f := indexFile{Version: indexFileVersion, Clean: clean, Costs: x.costs, Agents: make([]indexFileRow, 0, len(x.rows))}
	for _, id := range x.ids() {
		r := x.rows[id]
		f.Agents = append(f.Agents, indexFileRow{AgentRow: r.AgentRow, Count: r.count, Size: r.size})
	}
	for _, p := range x.pending {
		f.Pending = append(f.Pending, *p)
	}
	b, err := gojson.Marshal(f)
	x.mu.Unlock()
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
func (s *File) CheckIndex() ([]string, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	sizes, err := s.logSizes()
	if err != nil {
		return nil, err
	}
	fresh := newIndex()
	for agent, size := range sizes {
		if size == 0 && !s.createdHere(agent) {
			continue
		}
		s.indexLog(fresh, agent, size)
	}
	return diffIndexes(s.idx, fresh, ""), nil
}

// IndexChecker is implemented by the stores whose indexes `lineagec verify`
// checks against an agent's log.
type IndexChecker interface {
	// CheckIndexOf returns one line per difference between what the
	// indexes say of agent and what its log says.
	CheckIndexOf(agent string) ([]string, error)
}

var _ IndexChecker = (*File)(nil)

// CheckIndexOf implements IndexChecker.
func (s *File) CheckIndexOf(agent string) ([]string, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	if err := checkAgent(agent); err != nil {
		return nil, err
	}
	fresh := newIndex()
	if info, err := os.Stat(s.Path(agent)); err == nil && (info.Size() > 0 || s.createdHere(agent)) {
		s.indexLog(fresh, agent, info.Size())
	}
	return diffIndexes(s.idx, fresh, agent), nil
}

// diffIndexes lists how have differs from want (of only agent if not "").
func diffIndexes(have, want *index, agent string) []string {
	have.mu.Lock()
	defer have.mu.Unlock()
	var out []string
	for id, w := range want.rows {
		h := have.rows[id]
		switch {
		case h == nil:
			out = append(out, fmt.Sprintf("agent %s: missing from the index", id))
		case h.AgentRow != w.AgentRow:
			out = append(out, fmt.Sprintf("agent %s: index has %+v, the log says %+v", id, h.AgentRow, w.AgentRow))
		}
	}
	for id := range have.rows {
		if want.rows[id] == nil && (agent == "" || id == agent) {
			out = append(out, fmt.Sprintf("agent %s: in the index, without a log", id))
		}
	}
	for k, w := range want.pending {
		h := have.pending[k]
		if h == nil || h.RequestID != w.RequestID || h.Tool != w.Tool || h.Cost != w.Cost || h.At != w.At || string(h.Args) != string(w.Args) {
			out = append(out, fmt.Sprintf("agent %s: pending request %q (seq %d) missing or different in the index", w.Agent, w.RequestID, w.Seq))
		}
	}
	for k, h := range have.pending {
		if want.pending[k] == nil && (agent == "" || h.Agent == agent) {
			out = append(out, fmt.Sprintf("agent %s: the index has request %q (seq %d) pending, the log does not", h.Agent, h.RequestID, h.Seq))
		}
	}
	sort.Strings(out)
	return out
}
