package server

import "github.com/lineage-guard/lineage/internal/gogc"

// GCPercent is the garbage collector's target percentage for a process that
// serves the guard (decision D221 ('lineagec serve' runs its GC at 400)). A decision over HTTP allocates about
// 24 KiB, client and server together (`go test ./server -run '^$' -bench
// RequestHTTP -benchmem`), against a small live heap, so at Go's default of
// 100 the service collects often; at 400 the heap may grow to five times
// what is live, and the CPU a decision of BenchmarkNodes' nodes went from
// 212 to 169–189 µs (docs/stores.md, "Speed of several nodes").
const GCPercent = 400

// SetGCPercent gives the process GCPercent unless $GOGC chooses for it, and
// says whether it did. `lineagec serve` calls it; a program that embeds a
// Server may.
func SetGCPercent() bool { return gogc.Default(GCPercent) }
