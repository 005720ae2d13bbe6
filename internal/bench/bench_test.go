package bench

import (
	"context"
	"testing"
)

// TestRunSmall runs the whole measurement at a tiny size: every path must
// produce a number, and the workload must have the advertised mix of verdicts.
func TestRunSmall(t *testing.T) {
	res, err := Run(context.Background(), Options{Agents: 6, FileAgents: 3, Requests: 60, IdleAgents: 50, LongLog: 500})
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]int64{
		"oracle p50": res.OracleP50, "raw OPA p50": res.RawOPAP50, "runtime mem p50": res.RuntimeMemP50,
		"runtime file p99": res.RuntimeFileP99, "state bytes": res.StateBytesPerAgent, "long log p50": res.LongLogP50,
	} {
		if v <= 0 {
			t.Errorf("%s = %d, want a measurement", name, v)
		}
	}
	m := res.Workload
	if m.Decisions != 6*60 || m.Allowed == 0 || m.Denied == 0 || m.Pending == 0 {
		t.Errorf("workload mix %+v: want allows, denials and pending verdicts over 360 decisions", m)
	}
	if len(m.Reasons) < 3 {
		t.Errorf("deny reasons %v: want at least three different reasons", m.Reasons)
	}
}
