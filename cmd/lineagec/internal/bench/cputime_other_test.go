//go:build !unix

package bench

// cpuTime is not read here: BenchmarkCompile reports 0 CPU time.
func cpuTime() int64 { return 0 }
