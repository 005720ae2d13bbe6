//go:build !linux

package bench

import (
	"errors"
	"time"
)

// procCPU is not measured outside Linux.
func procCPU(pid int) (time.Duration, error) {
	return 0, errors.New("no CPU time of another process outside Linux")
}
