package server_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/server"
)

// TestPendingOf: a pending row as both hops give it (GET /v1/pending and
// lineagec pending on a local store): a request without args shows {}, never
// null, and the row's other fields come through as they are.
func TestPendingOf(t *testing.T) {
	at := time.Date(2026, 12, 2, 10, 0, 0, 5, time.UTC)
	for _, args := range []map[string]any{nil, {"to": "x"}} {
		p := server.PendingOf(runtime.PendingRow{Agent: "agt_a", Name: "bot", RequestID: "w1", Tool: "wire", Args: args, At: at, Cost: 2, Seq: 7})
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"agent":"agt_a","name":"bot","request_id":"w1","tool":"wire","args":{},"at":"2026-12-02T10:00:00.000000005Z","cost":2}`
		if args != nil {
			want = `{"agent":"agt_a","name":"bot","request_id":"w1","tool":"wire","args":{"to":"x"},"at":"2026-12-02T10:00:00.000000005Z","cost":2}`
		}
		if string(b) != want {
			t.Errorf("args %v:\n got %s\nwant %s", args, b, want)
		}
	}
}
