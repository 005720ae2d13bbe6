package bench

// The load of the deployed benchmark (`lineagec bench load`, a process of
// its own): the same client code as the in-process mode, against a server in
// another process.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// LoadPlan says what one load process drives: OPA's servers on recorded
// inputs, or the guard service on fresh agents of the workload.
type LoadPlan struct {
	Target string `json:"target"` // "opa" or "guard"
	// OPA: agent i posts Inputs[i], in order, to URLs[i].
	URLs   []string            `json:"urls,omitempty"`
	Inputs [][]json.RawMessage `json:"inputs,omitempty"`
	// The guard: its base URL and admin token; Agents fresh agents of the
	// workload (agent i: policy i % 2, the ops of seed i), Requests each.
	URL      string `json:"url,omitempty"`
	Token    string `json:"token,omitempty"`
	Agents   int    `json:"agents,omitempty"`
	Requests int    `json:"requests,omitempty"`
	// PIDs are the target's server processes, whose CPU time the load
	// reads right before and right after its window (Linux only).
	PIDs []int `json:"pids,omitempty"`
}

// LoadResult is one load process's measurement: every decision's latency,
// and the wall time of the window.
type LoadResult struct {
	Latencies []int64 `json:"latencies_ns"`
	Wall      int64   `json:"wall_ns"`
	// CPU is the CPU time plan.PIDs used in the window; -1 where it could
	// not be read.
	CPU int64 `json:"cpu_ns"`
	// LoadCPU is the CPU time of the load processes themselves, the whole
	// of their lives (their rusage; the parent fills it in).
	LoadCPU int64 `json:"-"`
}

// cpuOf is the CPU time the processes pids have used so far; -1 where it
// cannot be read.
func cpuOf(pids []int) time.Duration {
	var sum time.Duration
	for _, pid := range pids {
		d, err := procCPU(pid)
		if err != nil {
			return -1
		}
		sum += d
	}
	return sum
}

// Load drives plan on clients concurrent keep-alive connections for d at
// most (or until the decisions run out).
func Load(ctx context.Context, plan LoadPlan, clients int, d time.Duration) (*LoadResult, error) {
	if clients < 1 || d <= 0 {
		return nil, fmt.Errorf("bench load: connections must be at least 1 and the duration positive (%d, %s)", clients, d)
	}
	hc := newHTTPClient()
	defer hc.CloseIdleConnections()
	var (
		lat    []time.Duration
		wall   time.Duration
		err    error
		before time.Duration
	)
	begin := func() { before = cpuOf(plan.PIDs) }
	switch plan.Target {
	case "opa":
		if len(plan.URLs) != len(plan.Inputs) || len(plan.URLs) == 0 {
			return nil, fmt.Errorf("bench load: the plan has %d URLs for %d agents' inputs", len(plan.URLs), len(plan.Inputs))
		}
		begin()
		lat, wall, err = driveFor(ctx, len(plan.Inputs), clients, d, func(i, k int) (bool, error) {
			if k >= len(plan.Inputs[i]) {
				return false, nil
			}
			return true, postOPA(ctx, hc, plan.URLs[i], plan.Inputs[i][k])
		})
	case "guard":
		if plan.Agents < 1 || plan.Requests < 1 {
			return nil, fmt.Errorf("bench load: the plan has %d agents of %d requests", plan.Agents, plan.Requests)
		}
		ws, werr := serveWorkloads()
		if werr != nil {
			return nil, werr
		}
		lat, wall, err = driveGuard(ctx, plan.URL, plan.Token, hc, serveRuns(ws, plan.Agents, plan.Requests), clients, d, begin)
	default:
		return nil, fmt.Errorf("bench load: unknown target %q (want opa, guard)", plan.Target)
	}
	after := cpuOf(plan.PIDs)
	if err != nil {
		return nil, fmt.Errorf("bench load: %s: %w", plan.Target, err)
	}
	res := &LoadResult{Latencies: make([]int64, len(lat)), Wall: int64(wall), CPU: -1}
	if before >= 0 && after >= 0 && len(plan.PIDs) > 0 {
		res.CPU = int64(after - before)
	}
	for i, l := range lat {
		res.Latencies[i] = int64(l)
	}
	return res, nil
}
