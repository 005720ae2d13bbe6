//go:build !unix

package replay_test

import "time"

// cpuTime is not measured here: the benchmarks report no requests/cpu-s.
func cpuTime() time.Duration { return 0 }
