//go:build unix

package replay_test

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time the process has used (user and system, every
// thread): on a machine shared with other work, requests per CPU-second
// says more than requests per second of the wall clock.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
