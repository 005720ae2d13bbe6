package gogc

import (
	"runtime/debug"
	"testing"
)

func TestDefault(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Setenv("GOGC", "")
	if !Default(400) {
		t.Fatal("Default(400) with $GOGC empty did not set it")
	}
	if got := debug.SetGCPercent(100); got != 400 {
		t.Fatalf("GC percent %d after Default(400), want 400", got)
	}
	t.Setenv("GOGC", "150")
	if Default(400) {
		t.Fatal("Default(400) overrode $GOGC")
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GC percent %d after Default(400) with $GOGC set, want it untouched (100)", got)
	}
}
