package server

import "github.com/lineage-guard/lineage/internal/gogc"

// GCPercent is the garbage collector's target percentage for a process that
// serves the guard (decision D221). A decision over HTTP allocates about
// 30 KiB (request and response buffers, the JSON, OPA's evaluation, the
// record) against a small live heap, so at Go's default of 100 the service
// collected every few hundred decisions and spent about a quarter of its CPU
// on it; at 400 the heap may grow to five times what is live (tens of MiB for
// the default agent table) and a decision costs about 25% less CPU.
const GCPercent = 400

// SetGCPercent gives the process GCPercent unless $GOGC chooses for it, and
// says whether it did. `lineagec serve` calls it; a program that embeds a
// Server may.
func SetGCPercent() bool { return gogc.Default(GCPercent) }
