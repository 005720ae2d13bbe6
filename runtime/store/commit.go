package store

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// commitReq is a log's request to the committer. Each fileLog embeds one: its
// owner holds the log's mu from enqueue until the batch is done, so a log has
// at most one request in flight and the committer may use its file freely.
type commitReq struct {
	full bool  // fsync rather than fdatasync (a new file: its inode)
	dir  bool  // the directory entry must be durable too (Create)
	err  error // the outcome, set before the batch's done is closed
}

// committer is the group commit. Appenders write their bytes themselves (in
// parallel, into the page cache), then enqueue and wait. The committer takes
// everything queued, makes it durable with as few calls as the mode allows,
// and wakes the whole batch; what arrives meanwhile forms the next batch, so
// under load one sync covers as many appends as arrived during the previous one.
type committer struct {
	s    *File
	mode atomic.Int32 // SyncFiles or SyncFS; only the run goroutine changes it

	mu    sync.Mutex
	queue []*fileLog
	done  chan struct{} // closed when the batch now in queue is durable

	kick   chan struct{} // cap 1: "the queue is not empty"
	stop   chan struct{}
	exited chan struct{}

	batches, reqs atomic.Int64 // average batch = reqs/batches (CommitStats)
	syncTimes     syncHistogram
}

func newCommitter(s *File, mode SyncMode) *committer {
	c := &committer{
		s:      s,
		done:   make(chan struct{}),
		kick:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		exited: make(chan struct{}),
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
	select {
	case c.kick <- struct{}{}:
	default: // a kick is already pending; it will see l
	}
	<-done
	return l.req.err
}

// close stops the committer; the caller guarantees nothing is queued or will be.
func (c *committer) close() {
	close(c.stop)
	<-c.exited
}

func (c *committer) run() {
	defer close(c.exited)
	var spare []*fileLog
	for {
		select {
		case <-c.kick:
		case <-c.stop:
			return
		}
		c.mu.Lock()
		batch, done := c.queue, c.done
		if len(batch) == 0 {
			c.mu.Unlock()
			continue
		}
		c.queue, c.done = spare[:0], make(chan struct{})
		c.mu.Unlock()

		start := time.Now()
		c.syncBatch(batch)
		c.syncTimes.record(time.Since(start))
		c.batches.Add(1)
		c.reqs.Add(int64(len(batch)))
		close(done)
		clear(batch)
		spare = batch
	}
}

func (c *committer) syncBatch(batch []*fileLog) {
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
