package store

import "time"

// CommitStats describes a file store's group commit since it was opened: how
// many syncs made appends durable, how many appends (and creates) they
// covered, and how long one sync took. It tells apart what bounds durable
// latency: the disk's sync time, or the wait for a turn in a batch.
type CommitStats struct {
	Syncs   int64
	Appends int64
	// SyncP50 and SyncP99 are percentiles of one sync's duration, to within
	// 1/8 of their value (they come from a log-linear histogram).
	SyncP50, SyncP99, SyncMax time.Duration
}
