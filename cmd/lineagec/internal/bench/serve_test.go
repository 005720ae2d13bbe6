package bench

import (
	"context"
	"testing"
	"time"
)

// TestRunServe runs the service benchmark at a tiny size: every target at
// every level made decisions, and the table has (a), (b) and (c) per level.
func TestRunServe(t *testing.T) {
	res, err := RunServe(context.Background(), ServeOptions{Clients: []int{1, 4}, Agents: 4, Requests: 20, Duration: time.Second, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 6 {
		t.Fatalf("rows: %+v", res.Rows)
	}
	for i, r := range res.Rows {
		if want := []string{"opa", "memory", "file"}[i%3]; r.Target != want || r.Decisions == 0 || r.P50 <= 0 || r.P99 < r.P50 {
			t.Errorf("row %d: %+v (want target %s with decisions)", i, r, want)
		}
	}
	if res.Workload.Decisions != 4*20 || res.Workload.Pending == 0 || res.Workload.Denied == 0 {
		t.Errorf("workload: %+v", res.Workload)
	}
	if _, err := RunServe(context.Background(), ServeOptions{Clients: []int{0}}); err == nil {
		t.Error("0 clients was accepted")
	}
}

// BenchmarkServe is `lineagec bench serve` at 64 clients, one round: the
// decisions/s and p99 of (a) OPA's server and (c) the file store.
func BenchmarkServe(b *testing.B) {
	for i := 0; i < b.N; i++ {
		res, err := RunServe(context.Background(), ServeOptions{Clients: []int{64}, Rounds: 1, Duration: 2 * time.Second, Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range res.Rows {
			b.ReportMetric(r.PerSec, r.Target+"-decisions/s")
			b.ReportMetric(float64(r.P99)/1e6, r.Target+"-p99-ms")
		}
	}
}
