package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// syncFloor times n appends of a 300-byte record, each followed by
// fdatasync, to a file in dir: the disk's floor under one durable decision
// (a decision record is about that size). The file is removed after.
func syncFloor(dir string, n int) ([]time.Duration, error) {
	f, err := os.CreateTemp(dir, "sync-floor-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	rec := make([]byte, 300)
	for i := range rec {
		rec[i] = 'x'
	}
	rec[len(rec)-1] = '\n'
	lat := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if _, err := f.Write(rec); err != nil {
			return nil, err
		}
		if err := fdatasync(f); err != nil {
			return nil, fmt.Errorf("fdatasync %s: %w", filepath.Base(f.Name()), err)
		}
		lat = append(lat, time.Since(t0))
	}
	return lat, nil
}
