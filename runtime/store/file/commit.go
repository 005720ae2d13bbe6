package file

import (
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lineage-guard/lineage/runtime/store"
)

// commitReq is a log's request to the committer. Each fileLog embeds one: its
// owner holds the log's mu from enqueue until the batch is done, so a log has
// at most one request in flight and the committer may use its file freely.
type commitReq struct {
	full bool  // fsync rather than fdatasync (a new file: its inode)
	dir  bool  // the directory entry must be durable too (Create)
	err  error // the outcome, set before the batch's done is closed
	// firstSeq and lines are the append's records as written to the log,
	// for the journal (SyncJournal).
	firstSeq uint64
	lines    []byte
}

// committer is the group commit. Appenders write their bytes themselves (in
// parallel, into the page cache), then enqueue and wait. Whoever holds
// syncing takes everything queued, makes it durable with as few calls as the
// mode allows, and wakes the whole batch; what arrives meanwhile forms the
// next batch, so under load one sync covers as many appends as arrived during
// the previous one.
//
// An appender that finds the committer idle (no batch being synced, the run
// goroutine waiting) runs its own batch on its own goroutine: it leads. Else
// the run goroutine takes the next batch once the one in flight is durable,
// and goes on taking batches while appends keep arriving, as it did alone.
// Leading saves the two hand-offs of a lone append (waking the run goroutine,
// and being woken by it), which at one connection were most of what the
// guard adds to a sync; under load the run goroutine keeps the commits going
// back to back, without a hand-off between leaders (D419: a lone append
// syncs on its own goroutine).
type committer struct {
	s    *Store
	mode atomic.Int32 // SyncFiles, SyncFS or SyncJournal; changed only under syncing

	mu    sync.Mutex
	queue []*fileLog
	done  chan struct{} // closed when the batch now in queue is durable

	// syncing is held by whoever takes and syncs a batch (the run goroutine
	// or a leading appender) and guards everything below it but the atomics.
	syncing sync.Mutex
	// busy is set while the run goroutine is taking batches: appenders then
	// leave the next batch to it rather than lead.
	busy  atomic.Bool
	spare []*fileLog // the last batch's slice, reused
	// runQueues tells a busy committer whether the CPUs are saturated
	// (settle).
	runQueues *runQueues

	kick   chan struct{} // cap 1: "the queue is not empty"
	stop   chan struct{}
	exited chan struct{}

	batches, reqs atomic.Int64 // average batch = reqs/batches (CommitStats)
	syncTimes     syncHistogram

	// The journal (SyncJournal), used under syncing only (and by close,
	// after the run goroutine has stopped).
	journal    *os.File
	jkept      int64 // bytes at the start that checkpoints keep (see Store.damaged)
	jsize      int64 // bytes of acknowledged entries, jkept included
	jalloc     int64 // the file's size: jsize, then zeros (see JournalSlack)
	jbuf       []byte
	checkpoint int64 // journal bytes that trigger a checkpoint
	jerr       error // sticky: the journal could not be cut back after a failure
	// noCheckpoint is set once a syncfs has failed: the kernel reports a
	// writeback error to syncfs once, so a later syncfs that succeeds does not
	// prove the logs durable. The journal then keeps everything until the
	// store is reopened and replays it.
	noCheckpoint bool
	cpErr        error // the first failed checkpoint's error, reported by Close
	checkpoints  atomic.Int64
	// logged is where each log holds the records of the journal's entries
	// since the last checkpoint (the kept part aside): a checkpoint empties
	// the journal only once every log is seen to hold them, so that a log cut
	// back or edited under the store never loses the journal's copy (D250 (a journal outlives a log that lost its records)
	// (a journal outlives a log that lost its records)).
	logged map[*fileLog][]loggedRun
}

// loggedRun is a run of bytes of one log that the journal holds too: the
// lines of records first... at [off, end), with their CRC-32C.
type loggedRun struct {
	first    uint64
	off, end int64
	crc      uint32
}

func newCommitter(s *Store, mode SyncMode, journal *os.File, kept, checkpoint int64) *committer {
	c := &committer{
		s:          s,
		done:       make(chan struct{}),
		kick:       make(chan struct{}, 1),
		stop:       make(chan struct{}),
		exited:     make(chan struct{}),
		journal:    journal,
		jkept:      kept,
		jsize:      kept,
		jalloc:     kept,
		checkpoint: checkpoint,
		runQueues:  newRunQueues(),
	}
	c.mode.Store(int32(mode))
	go c.run()
	return c
}

// commit waits until everything l wrote before the call is durable. The
// caller holds l.mu and has filled l.req.full and l.req.dir.
func (c *committer) commit(l *fileLog) error {
	c.mu.Lock()
	c.queue = append(c.queue, l)
	done := c.done
	c.mu.Unlock()
	if !c.busy.Load() && c.syncing.TryLock() {
		// The committer is idle: lead. The batch taken holds l, unless
		// another leader took l along and has synced it already (done is then
		// closed and the queue may be empty).
		c.syncNext()
		c.checkpointIfDue()
		c.syncing.Unlock()
	} else {
		c.wake() // the batch in flight ends; the run goroutine then takes l's
	}
	<-done
	return l.req.err
}

// wake tells the run goroutine that the queue may not be empty.
func (c *committer) wake() {
	select {
	case c.kick <- struct{}{}:
	default: // a kick is already pending; it will see the queue
	}
}

// syncNext takes the queued batch, if any, makes it durable and wakes it;
// it says whether there was one. The caller holds syncing.
func (c *committer) syncNext() bool {
	c.mu.Lock()
	batch, done := c.queue, c.done
	if len(batch) == 0 {
		c.mu.Unlock()
		return false
	}
	c.queue, c.done = c.spare[:0], make(chan struct{})
	c.mu.Unlock()

	start := time.Now()
	c.syncBatch(batch)
	c.syncTimes.record(time.Since(start))
	c.batches.Add(1)
	c.reqs.Add(int64(len(batch)))
	close(done)
	clear(batch)
	c.spare = batch
	return true
}

// checkpointIfDue checkpoints the journal once it has grown to a
// checkpoint, before the next batch: the journal stays within one batch of
// CheckpointBytes. A failed checkpoint leaves the journal as it is: it still
// holds every record the logs may lack. The caller holds syncing.
func (c *committer) checkpointIfDue() {
	if c.journal != nil && c.jsize-c.jkept >= c.checkpoint && c.jerr == nil && !c.noCheckpoint {
		_ = c.checkpointNow()
	}
}

// close stops the committer; the caller guarantees nothing is queued or will
// be. With a journal it checkpoints (the logs are synced, the journal emptied)
// and closes it.
func (c *committer) close() error {
	close(c.stop)
	<-c.exited
	c.syncing.Lock() // no appender leads any more (none is left), but say so to the race detector
	defer c.syncing.Unlock()
	if c.journal == nil {
		return nil
	}
	errs := []error{c.cpErr}
	switch {
	case c.jerr != nil:
		errs = append(errs, c.jerr)
	case c.jsize > c.jkept && !c.noCheckpoint:
		errs = append(errs, c.checkpointNow())
	}
	if c.jerr == nil && c.jalloc > c.jsize {
		// A closed store's journal holds its entries only, not a zero tail.
		err := c.journal.Truncate(c.jsize)
		if err == nil {
			err = fdatasync(c.journal)
		}
		errs = append(errs, err)
	}
	return errors.Join(append(errs, c.journal.Close())...)
}

// run syncs the batches that queue while another is in flight, back to
// back while appends keep arriving.
func (c *committer) run() {
	defer close(c.exited)
	for {
		select {
		case <-c.kick:
		case <-c.stop:
			return
		}
		c.syncing.Lock()
		c.busy.Store(true)
		for {
			// Let the decisions on their way append first (D422: a busy
			// committer waits while the CPUs are saturated).
			settle(c.runQueues.saturated, time.Now, time.Sleep, settlePoll, settleMax)
			if !c.syncNext() {
				break
			}
			c.checkpointIfDue()
		}
		c.checkpointIfDue()
		// An append queued after the queue was seen empty either sees busy
		// and wakes this goroutine, or fails to take syncing and wakes it.
		c.busy.Store(false)
		c.syncing.Unlock()
	}
}

func (c *committer) syncBatch(batch []*fileLog) {
	if c.journal != nil {
		c.syncJournal(batch) // runs the hook itself, first
		return
	}
	if SyncMode(c.mode.Load()) == SyncFS {
		err := syncfs(c.s.dirF)
		if err == nil {
			for _, l := range batch {
				l.req.err = nil
			}
			c.hook(batch)
			return
		}
		if errors.Is(err, errNoSyncfs) {
			c.mode.Store(int32(SyncFiles))
		}
		// A failed syncfs does not say which file failed. Sync each file of
		// the batch on its own descriptor: a file whose writeback failed
		// reports it there, the others are made durable.
	}
	c.syncFiles(batch)
	c.hook(batch)
}

// syncFiles fdatasyncs every file of the batch (and the directory, if a
// Create is in it) on up to SyncWorkers goroutines.
func (c *committer) syncFiles(batch []*fileLog) {
	jobs := len(batch)
	dir := false
	for _, l := range batch {
		dir = dir || l.req.dir
	}
	if dir {
		jobs++
	}
	var dirErr error
	do := func(i int) {
		if i == len(batch) {
			dirErr = syncDir(c.s.dirF)
			return
		}
		l := batch[i]
		if l.req.full {
			l.req.err = l.f.Sync()
		} else {
			l.req.err = fdatasync(l.f)
		}
	}
	if workers := min(c.s.opts.SyncWorkers, jobs); workers <= 1 {
		for i := range jobs {
			do(i)
		}
	} else {
		var next atomic.Int64
		work := func() {
			for i := int(next.Add(1) - 1); i < jobs; i = int(next.Add(1) - 1) {
				do(i)
			}
		}
		var wg sync.WaitGroup
		for range workers - 1 {
			wg.Go(work)
		}
		work()
		wg.Wait()
	}
	if dirErr != nil {
		for _, l := range batch {
			if l.req.dir && l.req.err == nil {
				l.req.err = dirErr
			}
		}
	}
}

// maxEntry bounds one journal entry's payload (its length is a uint32); a
// variable for tests.
var maxEntry = 1 << 30

// syncJournal writes the batch's records to the journal in one write and
// makes them durable with one fdatasync. A Create in the batch has its new
// file and the directory synced too. On failure the batch's entries are cut
// off the journal again, so that no replay brings back records whose append
// failed. The test hook runs first, as a per-log sync failure would, and keeps
// a failed log's records out of the journal.
func (c *committer) syncJournal(batch []*fileLog) {
	if c.jerr != nil {
		for _, l := range batch {
			l.req.err = c.jerr
		}
		return
	}
	c.hook(batch)
	dir := false
	buf := c.jbuf[:0]
	var ok []*fileLog // the logs whose appends go on
	for _, l := range batch {
		switch {
		case l.req.err != nil:
			continue
		case len(l.req.lines) > maxEntry:
			l.req.err = fmt.Errorf("an append of %d bytes is too large for the journal (at most %d)", len(l.req.lines), maxEntry)
			continue
		case l.req.full:
			// A new file (Create): its inode and name must be durable.
			if err := l.f.Sync(); err != nil {
				l.req.err = err
				continue
			}
		}
		dir = dir || l.req.dir
		if len(l.req.lines) > 0 {
			buf = appendEntry(buf, l.agent, l.req.firstSeq, l.req.lines)
		}
		ok = append(ok, l)
	}
	if cap(buf) <= 4<<20 {
		c.jbuf = buf[:0]
	}
	if dir {
		// Only the Creates need the directory synced: on failure they fail,
		// and the other appends go on.
		if err := syncDir(c.s.dirF); err != nil {
			kept := ok[:0]
			for _, l := range ok {
				if l.req.dir {
					l.req.err = err
					continue
				}
				kept = append(kept, l)
			}
			ok = kept
		}
	}
	var err error
	if end := c.jsize + int64(len(buf)); len(buf) > 0 && end > c.jalloc {
		// Room for this batch and the next ones, zero and allocated: their
		// writes then change no size (D421: the journal is written in place).
		slack := min(JournalSlack, c.checkpoint)
		if err = allocate(c.journal, c.jalloc, end+slack-c.jalloc); err == nil {
			c.jalloc = end + slack
		}
	}
	if len(buf) > 0 && err == nil {
		if _, err = c.journal.WriteAt(buf, c.jsize); err == nil {
			if h := c.s.opts.hooks; h != nil && h.journal != nil {
				err = h.journal(buf)
			}
			if err == nil {
				err = fdatasync(c.journal)
			}
		}
	}
	if err != nil {
		// Cut back to the acknowledged entries, the zero tail too: the next
		// batch allocates again.
		terr := c.journal.Truncate(c.jsize)
		if terr == nil {
			c.jalloc = c.jsize
			terr = fdatasync(c.journal)
		}
		if terr != nil {
			c.jerr = fmt.Errorf("%w: journal: cutting off a failed batch: %v", ErrBroken, terr)
		}
		for _, l := range ok {
			l.req.err = fmt.Errorf("journal: %w", err)
		}
		return
	}
	c.jsize += int64(len(buf))
	for _, l := range ok {
		l.req.err = nil
		if len(l.req.lines) > 0 {
			c.noteLogged(l)
		}
	}
}

// noteLogged records where l's journaled lines lie in its log. l's owner
// holds l.mu and has written the lines at l.size (after the newline the last
// record lacked, if it did).
func (c *committer) noteLogged(l *fileLog) {
	if c.logged == nil {
		c.logged = map[*fileLog][]loggedRun{}
	}
	off := l.size
	if l.nl {
		off++
	}
	end := off + int64(len(l.req.lines))
	runs := c.logged[l]
	if n := len(runs); n > 0 && runs[n-1].end == off {
		runs[n-1].end = end
		runs[n-1].crc = crc32.Update(runs[n-1].crc, castagnoli, l.req.lines)
		return
	}
	c.logged[l] = append(runs, loggedRun{first: l.req.firstSeq, off: off, end: end,
		crc: crc32.Checksum(l.req.lines, castagnoli)})
}

// checkLogged reads back, from each log's file as the directory now names
// it, the bytes the journal holds since the last checkpoint: a log that was
// cut back, edited or replaced under the store lacks them. Its damage is
// returned, naming the agent and the first record of the run of records that
// differs (the log holds a record at or after it differently, or not at all;
// Close names the first lost record of a cut, see noteIfShrunk).
func (c *committer) checkLogged() error {
	var errs []error
	buf := make([]byte, 1<<20)
	for l, runs := range c.logged {
		f, err := os.Open(l.path)
		if err != nil {
			errs = append(errs, &store.DamageError{Agent: l.agent, Path: l.path, Seq: runs[0].first, Offset: runs[0].off,
				Reason: fmt.Sprintf("the log cannot be read back (%v): the journal, which holds its records from %d, is kept", err, runs[0].first)})
			continue
		}
		for _, r := range runs {
			crc, off := uint32(0), r.off
			for off < r.end {
				n, err := f.ReadAt(buf[:min(int64(len(buf)), r.end-off)], off)
				crc = crc32.Update(crc, castagnoli, buf[:n])
				off += int64(n)
				if err != nil {
					break
				}
			}
			if off != r.end || crc != r.crc {
				errs = append(errs, &store.DamageError{Agent: l.agent, Path: l.path, Seq: r.first, Offset: r.off,
					Reason: "the log changed under the store (cut back or edited) at this record or after it: it no longer holds every record the store acknowledged; the journal, which holds them from here on, is kept, and reopening the store restores them"})
				break
			}
		}
		f.Close()
	}
	return errors.Join(errs...)
}

// checkpointNow makes every log durable (one syncfs) and empties the journal
// (but for the part kept for damaged logs).
func (c *committer) checkpointNow() error {
	if err := syncfs(c.s.dirF); err != nil {
		c.noCheckpoint = true
		if c.cpErr == nil {
			c.cpErr = fmt.Errorf("store: checkpoint: %w (the journal keeps every record since; reopening replays it)", err)
		}
		return c.cpErr
	}
	if err := c.checkLogged(); err != nil {
		// Keep the journal whole until the store is reopened and replays it.
		c.noCheckpoint = true
		if c.cpErr == nil {
			c.cpErr = fmt.Errorf("store: checkpoint: the journal is kept: %w", err)
		}
		return c.cpErr
	}
	if err := c.journal.Truncate(c.jkept); err != nil {
		c.jerr = fmt.Errorf("%w: journal: checkpoint: %v", ErrBroken, err)
		return c.jerr
	}
	if err := fdatasync(c.journal); err != nil {
		c.jerr = fmt.Errorf("%w: journal: checkpoint: %v", ErrBroken, err)
		return c.jerr
	}
	c.jsize, c.jalloc = c.jkept, c.jkept
	clear(c.logged)
	c.checkpoints.Add(1)
	return nil
}

// hook lets tests fail a sync after the fact.
func (c *committer) hook(batch []*fileLog) {
	h := c.s.opts.hooks
	if h == nil || h.sync == nil {
		return
	}
	for _, l := range batch {
		if err := h.sync(l.agent); err != nil && l.req.err == nil {
			l.req.err = err
		}
	}
}
