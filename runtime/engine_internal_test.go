package runtime

import (
	"testing"
	"time"
)

// TestDeadlineCancel: the cancel of an evaluation says cancelled within
// cancelCheckEvery questions once its deadline has passed, never before it,
// and at once after Cancel.
func TestDeadlineCancel(t *testing.T) {
	before := &deadlineCancel{deadline: time.Now().Add(time.Hour)}
	for i := 0; i < 10*cancelCheckEvery; i++ {
		if before.Cancelled() {
			t.Fatalf("cancelled at question %d, an hour before the deadline", i+1)
		}
	}
	after := &deadlineCancel{deadline: time.Now().Add(-time.Nanosecond)}
	asked := 0
	for !after.Cancelled() {
		if asked++; asked > cancelCheckEvery {
			t.Fatalf("not cancelled after %d questions past the deadline", asked)
		}
	}
	if !after.Cancelled() {
		t.Error("a cancelled evaluation stopped being cancelled")
	}
	before.Cancel()
	if !before.Cancelled() {
		t.Error("Cancel did not cancel")
	}
}
