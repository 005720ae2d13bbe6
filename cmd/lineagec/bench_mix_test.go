package main

import (
	"context"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/lineage-guard/lineage/cmd/lineagec/internal/bench"
)

// TestBenchHelpMix runs the bench workload (memory store, 60 agents × 200
// decisions) and checks that `lineagec bench --help` states its mix: each
// share within two points, and exactly the deny reasons it produces.
func TestBenchHelpMix(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the workload")
	}
	res, err := bench.Run(context.Background(), bench.Options{Agents: 60, Requests: 200, Store: "memory", IdleAgents: 2})
	if err != nil {
		t.Fatal(err)
	}
	m := res.Workload
	share := func(n int) float64 { return 100 * float64(n) / float64(m.Decisions) }
	for _, c := range []struct {
		name  string
		got   float64
		state int
	}{{"allowed", share(m.Allowed), benchMix.allowed}, {"denied", share(m.Denied), benchMix.denied}, {"pending", share(m.Pending), benchMix.pending}} {
		if math.Abs(c.got-float64(c.state)) > 2 {
			t.Errorf("%s: measured %.1f%%, the help says %d%%", c.name, c.got, c.state)
		}
	}
	if got, want := slices.Sorted(maps.Keys(m.Reasons)), slices.Sorted(slices.Values(benchMix.reasons)); !slices.Equal(got, want) {
		t.Errorf("deny reasons: measured %v, the help names %v", got, want)
	}
	var help strings.Builder
	if code := run([]string{"bench", "--help"}, &help, &help); code != 0 {
		t.Fatalf("bench --help exited %d", code)
	}
	for _, r := range benchMix.reasons {
		if !strings.Contains(help.String(), r) {
			t.Errorf("bench --help does not name %s:\n%s", r, help.String())
		}
	}
}
