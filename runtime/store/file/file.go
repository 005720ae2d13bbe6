// Package file owns the file store: the store.Store that keeps each agent's
// log as a JSON-lines file in a data directory, with its group commit and
// journal, its lock, its index file (store.Lister), its checkpoint marks
// (store.Marks) and its notes of lost records. It knows nothing of hashes,
// verdicts or state (package runtime's), nor of other backends.
package file

import (
	"container/list"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lineage-guard/lineage/runtime/internal/index"
	"github.com/lineage-guard/lineage/runtime/store"
)

// Ext is the file name extension of a log in the store's directory.
const Ext = ".jsonl"

// SyncMode chooses how the store's group commit makes a batch durable.
type SyncMode int

const (
	// SyncDefault is SyncJournal on the file systems where syncfs(2) is known
	// to be complete (ext4, XFS, Btrfs, tmpfs), SyncFiles elsewhere.
	SyncDefault SyncMode = iota
	// SyncFiles fdatasyncs each file of a batch, on Options.SyncWorkers
	// goroutines in parallel.
	SyncFiles
	// SyncFS makes a batch durable with one syncfs(2) of the store's file
	// system (Linux; elsewhere, or if the kernel lacks it, SyncFiles). Its cost
	// grows with everything else written to that file system, so give the
	// store a file system of its own if other programs write heavily there.
	SyncFS
	// SyncJournal writes each batch's records to one journal file as well as
	// to the logs and makes the batch durable with one fdatasync of the
	// journal; every Options.CheckpointBytes of journal (and on Close) a
	// syncfs makes the logs durable and the journal is emptied. Opening the
	// store puts back from the journal what a crash of the machine took from
	// the logs. One fdatasync of one file has a short, steady latency: on
	// ext4 with 100 concurrent agents it measured 0.1-0.4 ms where a syncfs
	// of the batch's logs took 0.4-5 ms. Where syncfs(2) is not known to be
	// complete (see SyncDefault) the store uses SyncFiles instead.
	SyncJournal
)

func (m SyncMode) String() string {
	switch m {
	case SyncDefault:
		return "default"
	case SyncFiles:
		return "files"
	case SyncFS:
		return "syncfs"
	case SyncJournal:
		return "journal"
	}
	return fmt.Sprintf("SyncMode(%d)", int(m))
}

// Options tunes a Store. The zero value is the default.
type Options struct {
	// Sync is the group commit's way of making a batch durable.
	Sync SyncMode
	// SyncWorkers is how many files SyncFiles syncs at once (default 8).
	SyncWorkers int
	// CheckpointBytes is how much journal SyncJournal lets grow before it
	// syncs the logs and empties it (default DefaultCheckpointBytes).
	CheckpointBytes int64
	// MaxOpenFiles bounds the log files kept open (default 4096); the least
	// recently used idle ones are closed beyond it.
	MaxOpenFiles int
	// ReadOnly opens the directory to read logs only: no directory is made,
	// Create and Append fail with ErrReadOnly, and the lock is shared, so any
	// number of readers (and no writer) may hold it.
	ReadOnly bool
	// WaitForLock waits for another process to release the directory instead
	// of failing at once with ErrLocked.
	WaitForLock bool
	// LockTimeout, with WaitForLock, bounds the wait: after it Open fails
	// with ErrLocked, naming the holder. Zero waits for as long as it takes.
	LockTimeout time.Duration
	// OnLockWait, with WaitForLock, is called once, before waiting, when the
	// directory is found locked: with what the lock file says of its holder.
	OnLockWait func(holder LockHolder)
	// ShardAfter is how many logs the directory itself holds before new
	// logs go to shard directories (default DefaultShardAfter; negative:
	// every new log does). See docs/stores.md, "The data directory".
	ShardAfter int

	hooks *fileHooks // tests only: failure injection
}

var (
	// ErrLocked is returned by Open when another process holds the directory.
	ErrLocked = errors.New("store: the directory is in use by another process")
	// ErrBroken is returned by Append on a log whose earlier write or sync failed
	// in a way that leaves its durable state unknown; the store refuses further
	// appends to it until it is reopened (and the operator has looked).
	ErrBroken = errors.New("store: log unusable after a failed write or sync")
)

// LockName is the lock file a Store keeps in its directory.
const LockName = ".lock"

// fileHooks inject failures in tests; production code cannot set them.
type fileHooks struct {
	// write, if set, replaces the write of an append's bytes at off.
	write func(agent string, f *os.File, b []byte, off int64) (int, error)
	// sync, if set, runs after agent's batch is synced; an error fails it.
	sync func(agent string) error
	// journal, if set, runs after a batch's entries are written to the
	// journal, before they are synced; an error fails the batch.
	journal func(entries []byte) error
}

// Store is the embedded default store.Store: a directory holding one
// JSON-lines file per agent, <agent>.jsonl (in the directory itself or, once
// it holds many, in a shard directory: see ShardAfter), one record per line
// (and, in SyncJournal mode, the journal, JournalName).
//
// Append writes at the log's known good length and returns once a group
// commit has made the records durable (in the log, or in the journal from
// which opening the store puts them back); appends of different agents share
// syncs.
// A failed write is cut off again; after a failed sync the log is refused
// further appends (ErrBroken) until the store is reopened. On open, a final
// line without its newline (a write torn by a crash) is ignored by Scan and cut
// off before the next Append.
//
// One Store must own a directory: two stores (or processes) appending to the
// same directory would corrupt each other's logs.
type Store struct {
	dir     string
	dirF    *os.File
	lock    *os.File // the directory's lock, held until Close
	opts    Options
	logs    sync.Map // agent id → *fileLog
	handles handles
	commit  *committer
	// roJournal holds, for a read-only store, the journal's records by agent:
	// Scan shows them in place of the log's own from their first on (see
	// SyncJournal).
	roJournal map[string]journalLog
	// damaged holds the logs the journal could not be replayed into at open
	// (missing, or damaged before the journal's records): their records stay
	// in the journal, and Scan, Append and Create report the damage.
	damaged map[string]error

	markLocks sync.Map   // agent id → *sync.Mutex: one StoreMark at a time
	marksMu   sync.Mutex // guards marksDir
	marksDir  *os.File   // MarksDir, once StoreMark made it

	idx *index.Index // the indexes (Lister), saved in IndexName at Close

	createMu sync.Mutex   // one Create at a time: where a log goes depends on flat
	flat     atomic.Int64 // logs in the directory itself (see placeFor)

	closed  atomic.Bool
	active  atomic.Int64  // calls in progress
	drained chan struct{} // cap 1: active reached 0 after closed was set
}

// fileLog is the state of one agent's log. Its mu serializes everything that
// writes the file or changes these fields; Scan holds it only to take a
// snapshot, then reads under refs.
type fileLog struct {
	agent, path string

	mu    sync.Mutex
	f     *os.File // nil when not open
	known bool     // size and count hold (the file was read once)
	size  int64    // bytes of complete, durable records
	count uint64   // records in those bytes
	tail  bool     // the file has bytes beyond size: cut them before writing
	nl    bool     // the last record lacks its newline: write it first
	err   error    // sticky: the log is damaged or broken
	refs  int      // Scans reading f without mu
	// created: this store made the log (Agents lists it while it is empty).
	created atomic.Bool

	elem *list.Element // in handles, iff f != nil; guarded by handles.mu
	req  commitReq     // see commitReq
}

var _ store.Store = (*Store)(nil)

// Open opens the file store in dir, creating the directory if needed.
func Open(dir string, opts Options) (*Store, error) {
	if dir == "" {
		return nil, errors.New("store: open: empty directory name")
	}
	if !opts.ReadOnly {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("store: open %s: %w", dir, err)
		}
	}
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", dir, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("store: open %s: not a directory", dir)
	}
	if !opts.ReadOnly {
		probe, err := os.CreateTemp(dir, ".probe-*")
		if err != nil {
			return nil, fmt.Errorf("store: open %s: directory not writable: %w", dir, err)
		}
		probe.Close()
		os.Remove(probe.Name())
	}
	lock, err := lockDir(filepath.Join(dir, LockName), opts)
	if err != nil {
		return nil, err
	}
	dirF, err := os.Open(dir)
	if err != nil {
		unlockDir(lock, opts.ReadOnly)
		return nil, fmt.Errorf("store: open %s: %w", dir, err)
	}
	if opts.SyncWorkers <= 0 {
		opts.SyncWorkers = 8
	}
	if opts.MaxOpenFiles <= 0 {
		opts.MaxOpenFiles = 4096
	}
	if opts.CheckpointBytes <= 0 {
		opts.CheckpointBytes = DefaultCheckpointBytes
	}
	if opts.ShardAfter == 0 {
		opts.ShardAfter = DefaultShardAfter
	}
	mode := opts.Sync
	if mode == SyncDefault || mode == SyncJournal {
		// The journal needs a complete syncfs(2) for its checkpoints.
		mode = SyncFiles
		if syncfsTrusted(dirF) {
			mode = SyncJournal
		}
	}
	if !opts.ReadOnly {
		// First records that a crash kept from being renamed into place.
		for _, pattern := range []string{createPrefix + "*", filepath.Join("[0-9a-f][0-9a-f]", createPrefix+"*")} {
			leftovers, _ := filepath.Glob(filepath.Join(dir, pattern))
			for _, name := range leftovers {
				os.Remove(name)
			}
		}
	}
	s := &Store{dir: dir, dirF: dirF, lock: lock, opts: opts, drained: make(chan struct{}, 1)}
	s.handles.max = opts.MaxOpenFiles
	fail := func(err error) (*Store, error) {
		dirF.Close()
		unlockDir(lock, opts.ReadOnly)
		return nil, err
	}
	var (
		journal *os.File
		kept    int64
	)
	switch {
	case opts.ReadOnly:
		// A writer that crashed may have left records in the journal that
		// the logs lack; a reader shows them without writing anything.
		if s.roJournal, err = s.readOnlyJournal(); err != nil {
			return fail(err)
		}
	case mode == SyncJournal:
		if journal, kept, s.damaged, err = s.openJournal(); err != nil {
			return fail(err)
		}
	default:
		// A store last opened with a journal: put back what it holds, and
		// remove it unless it must keep records it could not put back.
		switch _, serr := os.Stat(filepath.Join(dir, JournalName)); {
		case serr == nil:
			j, kept, damaged, err := s.openJournal()
			if err != nil {
				return fail(err)
			}
			j.Close()
			s.damaged = damaged
			if kept == 0 {
				if err := os.Remove(filepath.Join(dir, JournalName)); err != nil {
					return fail(fmt.Errorf("store: journal: %w", err))
				}
			}
		case !errors.Is(serr, fs.ErrNotExist):
			return fail(fmt.Errorf("store: journal: %w", serr))
		}
	}
	lost, err := s.readLost()
	if err != nil {
		if journal != nil {
			journal.Close()
		}
		return fail(err)
	}
	for agent, err := range lost {
		if _, ok := s.damaged[agent]; !ok {
			if s.damaged == nil {
				s.damaged = map[string]error{}
			}
			s.damaged[agent] = err
		}
	}
	logs, err := listLogs(dir)
	if err != nil {
		if journal != nil {
			journal.Close()
		}
		return fail(fmt.Errorf("store: list %s: %w", dir, err))
	}
	s.flat.Store(int64(logs.flat))
	for _, agent := range logs.twice {
		if s.damaged == nil {
			s.damaged = map[string]error{}
		}
		s.damaged[agent] = s.twiceDamage(agent)
	}
	s.commit = newCommitter(s, mode, journal, kept, opts.CheckpointBytes)
	s.idx = s.loadIndex(logs)
	return s, nil
}

// SyncMode returns the way the store makes appends durable: SyncFiles,
// SyncFS or SyncJournal, never SyncDefault.
func (s *Store) SyncMode() SyncMode { return SyncMode(s.commit.mode.Load()) }

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// Path returns the file that holds agent's log or, if it has none, the file
// a Create of it would make now.
func (s *Store) Path(agent string) string {
	if p, err := s.find(agent); err == nil {
		return p
	}
	return s.placeFor(agent)
}

func (s *Store) enter() error {
	s.active.Add(1)
	if s.closed.Load() {
		s.exit()
		return store.ErrClosed
	}
	return nil
}

func (s *Store) exit() {
	if s.active.Add(-1) == 0 && s.closed.Load() {
		select {
		case s.drained <- struct{}{}:
		default:
		}
	}
}

// Create implements store.Store.
func (s *Store) Create(agent string) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	if s.opts.ReadOnly {
		return fmt.Errorf("%w: create %s in %s", store.ErrReadOnly, agent, s.dir)
	}
	if err := store.CheckAgent(agent); err != nil {
		return err
	}
	if err := s.damaged[agent]; err != nil {
		return err // the journal holds records of a log by that name
	}
	s.createMu.Lock()
	defer s.createMu.Unlock()
	if path, err := s.find(agent); err == nil {
		return fmt.Errorf("%w: %s (%s)", store.ErrExists, agent, path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("store: %s: create: %w", agent, err)
	}
	path := s.placeFor(agent)
	flat := filepath.Dir(path) == filepath.Clean(s.dir)
	if !flat {
		if err := s.makeShard(filepath.Dir(path)); err != nil {
			return fmt.Errorf("store: %s: create: %w", agent, err)
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%w: %s (%s)", store.ErrExists, agent, path)
	}
	if err != nil {
		return fmt.Errorf("store: %s: create: %w", agent, err)
	}
	if flat {
		s.flat.Add(1)
	}
	v, _ := s.logs.LoadOrStore(agent, &fileLog{agent: agent, path: path})
	l := v.(*fileLog)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil && !sameFile(l.f, f) {
		// A handle on a file that was deleted behind the store's back.
		s.handles.remove(l)
		l.f.Close()
		l.f, l.known = nil, false
	}
	l.path = path
	if l.f == nil {
		l.f = f
		s.handles.add(l)
	} else { // an Append or Scan opened the new file first; keep its handle
		f.Close()
	}
	if !l.known {
		l.known, l.size, l.count, l.tail, l.nl, l.err = true, 0, 0, false, false, nil
	}
	l.created.Store(true)
	s.idx.Create(agent)
	// Nothing is synced: an empty log is not listed after a crash (see
	// Agents), and the first records make the log durable (appendFirst).
	return nil
}

func sameFile(a, b *os.File) bool {
	sa, err := a.Stat()
	if err != nil {
		return false
	}
	sb, err := b.Stat()
	return err == nil && os.SameFile(sa, sb)
}

// log returns agent's fileLog, without opening its file. ErrNotFound if
// neither this store nor the directory knows the agent.
func (s *Store) log(agent string) (*fileLog, error) {
	if err := store.CheckAgent(agent); err != nil {
		return nil, err
	}
	if v, ok := s.logs.Load(agent); ok {
		return v.(*fileLog), nil
	}
	path, err := s.find(agent)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s (%s)", store.ErrNotFound, agent, path)
		}
		return nil, fmt.Errorf("store: %s: %w", agent, err)
	}
	v, _ := s.logs.LoadOrStore(agent, &fileLog{agent: agent, path: path})
	return v.(*fileLog), nil
}

// open makes sure l.f is open and l's length is known; the caller holds l.mu.
func (s *Store) open(l *fileLog) error {
	if l.f != nil {
		s.handles.touch(l)
		return nil
	}
	flag := os.O_RDWR
	if s.opts.ReadOnly {
		flag = os.O_RDONLY
	}
	f, err := os.OpenFile(l.path, flag, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %s (%s)", store.ErrNotFound, l.agent, l.path)
		}
		return fmt.Errorf("store: %s: open: %w", l.agent, err)
	}
	if !l.known {
		res, err := scanLines(l.agent, l.path, f, -1, nil)
		var damage *store.DamageError
		switch {
		case errors.As(err, &damage):
			// Scan reads up to the damage and reports it; Append refuses.
			l.err = damage
			l.size, l.count = res.end, res.count
			if st, serr := f.Stat(); serr == nil {
				l.size = st.Size()
			}
		case err != nil:
			f.Close()
			return err
		default:
			l.size, l.count, l.tail, l.nl = res.good, res.count, res.end > res.good, res.unterminated
		}
		l.known = true
	} else if st, err := f.Stat(); err != nil {
		f.Close()
		return fmt.Errorf("store: %s: %w", l.agent, err)
	} else if st.Size() < l.size {
		l.err = fmt.Errorf("%w: %s: the file shrank from %d to %d bytes while the store was open (%s)",
			ErrBroken, l.agent, l.size, st.Size(), l.path)
	} else {
		l.tail = st.Size() > l.size
	}
	l.f = f
	s.handles.add(l)
	return nil
}

var writeBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// Append implements store.Store.
func (s *Store) Append(agent string, firstSeq uint64, recs ...[]byte) (err error) {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	if s.opts.ReadOnly {
		return fmt.Errorf("%w: append to %s in %s", store.ErrReadOnly, agent, s.dir)
	}
	if err := s.damaged[agent]; err != nil {
		return err
	}
	l, err := s.log(agent)
	if err != nil {
		return err
	}
	total, err := store.CheckRecords(agent, firstSeq, recs)
	if err != nil {
		return err
	}
	if s.commit.journal != nil && total+len(recs) > maxEntry {
		return fmt.Errorf("%w: %s: an append of %d bytes is larger than one journal entry takes (%d)", store.ErrBadRecord, agent, total+len(recs), maxEntry)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	defer func() { // under l.mu: the index sees each log's records in order
		if err == nil && len(recs) > 0 {
			s.idx.Apply(agent, firstSeq, l.size, recs)
		}
	}()
	if err := s.open(l); err != nil {
		return err
	}
	if l.err != nil {
		return l.err
	}
	if firstSeq != l.count {
		return store.SeqError(agent, l.path, firstSeq, l.count)
	}
	if len(recs) == 0 {
		return nil
	}
	if l.count == 0 && l.refs == 0 {
		return s.appendFirst(l, recs)
	}
	if l.tail {
		if err := s.truncate(l, "cut torn tail"); err != nil {
			return err
		}
	}

	bp := writeBufs.Get().(*[]byte)
	b := (*bp)[:0]
	if cap(b) < total+len(recs) {
		b = make([]byte, 0, total+len(recs))
	}
	if l.nl {
		b = append(b, '\n') // the last record's missing newline (D40: a damaged journal never removes an intact record)
	}
	for _, r := range recs {
		b = append(b, r...)
		b = append(b, '\n')
	}
	// The pooled buffer goes back once the batch is durable: the journal
	// copies the records from it.
	defer func() {
		if cap(b) <= 1<<20 {
			*bp = b[:0]
			writeBufs.Put(bp)
		}
	}()
	var n int
	if h := s.opts.hooks; h != nil && h.write != nil {
		n, err = h.write(agent, l.f, b, l.size)
	} else {
		n, err = l.f.WriteAt(b, l.size)
	}
	if err != nil {
		err = fmt.Errorf("store: %s: append at seq %d: %w", agent, firstSeq, err)
		if n > 0 {
			// Cut the partial write off, and make the cut durable: a
			// multi-record write may hold whole lines that must not
			// reappear after a crash.
			if terr := s.truncate(l, "cut failed write"); terr != nil {
				return fmt.Errorf("%w; %w", err, terr)
			}
		}
		return err
	}

	lines := b
	if l.nl {
		lines = b[1:]
	}
	l.req = commitReq{firstSeq: firstSeq, lines: lines}
	err = s.commit.commit(l)
	l.req.lines = nil
	if err != nil {
		// The bytes may or may not be on disk, and after a failed writeback
		// the page cache may no longer tell. Cut them off (best effort) and
		// stop trusting the file.
		if l.f.Truncate(l.size) == nil {
			_ = l.f.Sync()
		}
		l.err = fmt.Errorf("%w: %s: sync of records %d..%d failed: %v (%s)",
			ErrBroken, agent, firstSeq, firstSeq+uint64(len(recs))-1, err, l.path)
		return fmt.Errorf("store: %s: append at seq %d: sync: %w (%s)", agent, firstSeq, err, l.path)
	}
	l.size += int64(len(b))
	l.count += uint64(len(recs))
	l.nl = false
	return nil
}

// appendFirst writes the first records of an empty log so that a crash at
// any moment leaves the log empty or holding all of them (D41: crash-safe create): they go to a
// temporary file, which is synced and renamed over the empty log, and the
// directory is synced. The caller holds l.mu; no Scan is reading l.f.
func (s *Store) appendFirst(l *fileLog, recs [][]byte) error {
	b := joinLines(recs)
	tmp, err := os.CreateTemp(filepath.Dir(l.path), createPrefix+l.agent+"-*")
	if err != nil {
		return fmt.Errorf("store: %s: append at seq 0: %w", l.agent, err)
	}
	h := s.opts.hooks
	if h != nil && h.write != nil {
		_, err = h.write(l.agent, tmp, b, 0)
	} else {
		_, err = tmp.WriteAt(b, 0)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if err == nil && h != nil && h.sync != nil {
		err = h.sync(l.agent)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), l.path)
	}
	if err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("store: %s: append at seq 0: %w (%s)", l.agent, err, l.path)
	}
	s.handles.remove(l)
	l.f.Close()
	l.f = tmp
	s.handles.add(l)
	l.size, l.count, l.tail, l.nl = int64(len(b)), uint64(len(recs)), false, false
	if err := s.syncDirOf(l.path); err != nil {
		// The records are in the log, but whether its new name is durable
		// is not known: refuse further appends until the store is reopened.
		l.err = fmt.Errorf("%w: %s: syncing the directory after its first records: %v (%s)", ErrBroken, l.agent, err, l.path)
		return fmt.Errorf("store: %s: append at seq 0: %w", l.agent, err)
	}
	return nil
}

// createPrefix starts the name of the temporary file of a log's first
// records (a leading dot: no agent id can take it). Open removes those a
// crash left.
const createPrefix = ".create-"

// truncate cuts l's file back to l.size and syncs the cut; on failure the log
// is broken. The caller holds l.mu.
func (s *Store) truncate(l *fileLog, why string) error {
	err := l.f.Truncate(l.size)
	if err == nil {
		err = l.f.Sync()
	}
	if err != nil {
		l.err = fmt.Errorf("%w: %s: %s at byte %d: %v", ErrBroken, l.agent, why, l.size, err)
		return l.err
	}
	l.tail = false
	return nil
}

// Scan implements store.Store. It sees the records acknowledged before it started;
// fn may append to the log it is scanning. fn must not modify the slice, nor
// call Close.
func (s *Store) Scan(agent string, fn func(seq uint64, rec []byte) error) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	if err := store.CheckAgent(agent); err != nil {
		return err
	}
	if jl, ok := s.roJournal[agent]; ok {
		return s.scanWithJournal(agent, jl, fn)
	}
	if err := s.damaged[agent]; err != nil {
		// The records before the damage are intact: passed on, as for
		// damage found in the log itself.
		var damage *store.DamageError
		if errors.As(err, &damage) && damage.Seq > 0 {
			f, ferr := os.Open(damage.Path)
			if ferr != nil {
				return err
			}
			defer f.Close()
			if serr := scanPrefix(agent, damage.Path, f, -1, damage.Seq, fn); serr != nil {
				return serr
			}
		}
		return err
	}
	l, err := s.log(agent)
	if err != nil {
		return err
	}
	l.mu.Lock()
	if err := s.open(l); err != nil {
		l.mu.Unlock()
		return err
	}
	f, limit, count, path := l.f, l.size, l.count, l.path
	l.refs++
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.refs--
		l.mu.Unlock()
	}()

	res, err := scanLines(agent, path, f, limit, fn)
	var stop errStop
	switch {
	case errors.As(err, &stop):
		return stop.err
	case err != nil:
		return err
	case res.good != limit || res.count < count:
		return fmt.Errorf("store: %s: the file changed under the store: read %d records in %d bytes, expected %d in %d (%s)",
			agent, res.count, res.good, count, limit, path)
	}
	return nil
}

// scanWithJournal is Scan, for a read-only store, of a log that a crashed
// writer's journal continues: what the next writer's replay will make of it
// (see planReplay), without writing.
func (s *Store) scanWithJournal(agent string, jl journalLog, fn func(seq uint64, rec []byte) error) error {
	if jl.err != nil {
		return jl.err
	}
	path := s.Path(agent)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &store.DamageError{Agent: agent, Path: path, Reason: fmt.Sprintf("the log is missing, and the journal holds its records from %d", jl.first())}
	}
	if err != nil {
		return fmt.Errorf("store: %s: open: %w", agent, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("store: %s: %w", agent, err)
	}
	p, err := planReplay(agent, path, f, st.Size(), jl)
	if err != nil {
		return err
	}
	if err := scanPrefix(agent, path, f, p.cut, p.keep, fn); err != nil {
		return err
	}
	for i, rec := range p.write {
		if err := fn(p.keep+uint64(i), rec); err != nil {
			return err
		}
	}
	return p.lost
}

// scanPrefix passes fn the log's records before seq n, read from the file's
// first limit bytes (limit < 0: all of it).
func scanPrefix(agent, path string, r io.ReaderAt, limit int64, n uint64, fn func(seq uint64, rec []byte) error) error {
	_, err := scanLines(agent, path, r, limit, func(seq uint64, line []byte) error {
		if seq >= n {
			return errFound
		}
		return fn(seq, line)
	})
	var stop errStop
	var damage *store.DamageError
	switch {
	case errors.As(err, &stop) && stop.err == errFound:
		return nil
	case errors.As(err, &stop):
		return stop.err
	case errors.As(err, &damage) && damage.Seq >= n:
		return nil
	}
	return err
}

// createdHere says whether this store created agent's log.
func (s *Store) createdHere(agent string) bool {
	v, ok := s.logs.Load(agent)
	return ok && v.(*fileLog).created.Load()
}

// Agents implements store.Store: the ids of the logs in the directory and
// its shard directories, but for empty ones that this store did not create:
// an empty log is a Create whose first records never became durable (D41: crash-safe create).
func (s *Store) Agents() ([]string, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	d, err := listLogs(s.dir)
	if err != nil {
		return nil, fmt.Errorf("store: list %s: %w", s.dir, err)
	}
	var ids []string
	for id, lf := range d.logs {
		if info, err := lf.ent.Info(); err != nil || info.Size() == 0 && !s.createdHere(id) {
			continue // gone since, or an empty log: a create that never got its first records (D41: crash-safe create)
		}
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids, nil
}

// Close implements store.Store: it waits for the calls in progress, then closes
// every file. Later calls of any method, Close included, return ErrClosed.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return store.ErrClosed
	}
	for s.active.Load() > 0 {
		<-s.drained
	}
	var errs []error
	if err := s.commit.close(); err != nil {
		errs = append(errs, err)
	}
	if !s.opts.ReadOnly {
		if err := s.saveIndex(); err != nil {
			errs = append(errs, err)
		}
	}
	s.logs.Range(func(_, v any) bool {
		l := v.(*fileLog)
		l.mu.Lock()
		if err := s.noteIfShrunk(l); err != nil {
			errs = append(errs, err)
		}
		if l.f != nil {
			s.handles.remove(l)
			if err := l.f.Close(); err != nil {
				errs = append(errs, fmt.Errorf("store: %s: %w", l.agent, err))
			}
			l.f = nil
		}
		l.mu.Unlock()
		return true
	})
	if s.marksDir != nil {
		s.marksDir.Close()
	}
	if err := s.dirF.Close(); err != nil {
		errs = append(errs, fmt.Errorf("store: close %s: %w", s.dir, err))
	}
	unlockDir(s.lock, s.opts.ReadOnly)
	return errors.Join(errs...)
}
