//go:build !unix

package bench

// cpuTime is not read here: the benchmarks report 0 CPU time.
func cpuTime() int64 { return 0 }
