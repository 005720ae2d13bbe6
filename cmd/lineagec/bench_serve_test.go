package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/lineage-guard/lineage/cmd/lineagec/internal/bench"
)

// TestBenchServeDeployed runs `lineagec bench serve --json` as deployed, at
// a tiny size on loopback, with the builtin load: OPA's servers, the guard
// and the loads are processes of their own; every row made decisions, every
// target of issue 20 has a positive measured ratio, and no process the run
// started is alive after it.
func TestBenchServeDeployed(t *testing.T) {
	res := benchServeDeployed(t, "builtin", "300ms")
	if res.Load != "lineagec bench load" {
		t.Errorf("load %q", res.Load)
	}
	if n := countRole(res, "load"); n != 2*2 {
		t.Errorf("%d load processes, want 4 (2 levels × 2 targets)", n)
	}
}

// TestBenchServeDeployedWrk is TestBenchServeDeployed with wrk as the load
// (D415 (bench serve's load from wrk)): its rows say so, and every wrk is
// gone after the run. It needs wrk (apt-get install wrk): it skips without
// one, except under CI=true, where it fails.
func TestBenchServeDeployedWrk(t *testing.T) {
	wrk, err := exec.LookPath("wrk")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("wrk is not on PATH (apt-get install wrk); under CI=true bench serve's wrk load must be tested")
		}
		t.Skip("wrk is not on PATH (apt-get install wrk): bench serve's wrk load is not tested")
	}
	res := benchServeDeployed(t, wrk, "1s")
	if !strings.HasPrefix(res.Load, "wrk ") {
		t.Errorf("load %q, want wrk and its version", res.Load)
	}
	// At one connection OPA's two servers are driven one after the other,
	// at 4 side by side: a wrk each, and one for the guard, at each level.
	if n := countRole(res, "load"); n != 2*3 {
		t.Errorf("%d wrk processes, want 6 (2 levels × (2 OPA servers + the guard))", n)
	}
}

// TestBenchServeMemoryGuard: --memory-guard adds a third target, a guard on
// the memory store, a process of its own with rows of its own; and the CPU
// profiles of the guards and of lineagec's own OPA servers are written.
func TestBenchServeMemoryGuard(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "cpu")
	res := benchServeDeployed(t, "builtin", "300ms", "--memory-guard", "--guard-cpuprofile", prof, "--opa-cpuprofile", prof+".opa")
	if n := countRole(res, "guard-memory"); n != 1 {
		t.Errorf("%d memory guards, want 1: %+v", n, res.Processes)
	}
	for _, f := range []string{prof, prof + ".memory", prof + ".opa.invoice", prof + ".opa.extension"} {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Errorf("CPU profile %s: %v (want one written)", f, err)
		}
	}
}

func countRole(res bench.DeployedResult, role string) int {
	n := 0
	for _, p := range res.Processes {
		if p.Role == role {
			n++
		}
	}
	return n
}

// benchServeDeployed runs `lineagec bench serve --json --load load` at a
// tiny size, rounds of d, checks what every run must have, and returns
// the result.
func benchServeDeployed(t *testing.T, load, d string, extra ...string) bench.DeployedResult {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes")
	}
	if goruntime.GOOS == "windows" {
		t.Skip("stops its processes with SIGTERM")
	}
	bin := filepath.Join(t.TempDir(), "lineagec")
	if err := os.Symlink(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"bench", "serve", "--json", "--opa", "builtin", "--load", load, "--clients", "1,4", "--agents", "4",
		"--requests", "20", "--duration", d, "--rounds", "1"}, extra...)
	cmd := exec.Command(bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bench serve: %v\n%s", err, stderr.String())
	}
	var res bench.DeployedResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("the JSON: %v\n%s", err, out)
	}
	targets := []string{"opa", "guard"}
	if slices.Contains(extra, "--memory-guard") {
		targets = append(targets, "guard-memory")
	}
	if len(res.Rows) != 2*len(targets) {
		t.Fatalf("rows: %+v", res.Rows)
	}
	for i, r := range res.Rows {
		if want := targets[i%len(targets)]; r.Target != want || r.Clients != []int{1, 4}[i/len(targets)] || r.Decisions == 0 ||
			r.PerSec <= 0 || r.P50 <= 0 || r.P99 < r.P50 || r.Load != res.Load || r.LoadCPUPerDecision <= 0 {
			t.Errorf("row %d: %+v (want target %s with decisions, load %q)", i, r, want, res.Load)
		}
		if (r.DecisionsPerSync > 0) != (r.Target == "guard") {
			t.Errorf("row %d: %s has %.2f decisions a sync (want some for the guard on the file store only)", i, r.Target, r.DecisionsPerSync)
		}
	}
	names := map[string]bool{}
	for _, tg := range res.Targets {
		names[tg.Name] = true
		if tg.Measured <= 0 || tg.Goal <= 0 || (tg.Rule != ">=" && tg.Rule != "<=") {
			t.Errorf("target %+v", tg)
		}
	}
	for _, want := range []string{"4 connections: guard decisions/s over OPA's", "4 connections: guard p99 over OPA's",
		"1 connection(s): guard p50 over (OPA's p50 + fdatasync p50)"} {
		if !names[want] {
			t.Errorf("no target %q in %+v", want, res.Targets)
		}
	}
	if len(res.Targets) != 3 {
		t.Errorf("targets: %+v", res.Targets)
	}
	if res.SyncP50 <= 0 || res.SyncCount != 200 || res.Workload.Decisions != 4*20 {
		t.Errorf("fdatasync p50 %d of %d, workload %+v", res.SyncP50, res.SyncCount, res.Workload)
	}
	roles := map[string]int{}
	for _, p := range res.Processes {
		roles[p.Role]++
		if p.PID <= 0 || p.PID == os.Getpid() || p.PID == cmd.Process.Pid {
			t.Errorf("process %+v is not a child of its own", p)
			continue
		}
		if err := syscall.Kill(p.PID, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("the %s process %d is still there after the run (kill 0: %v)", p.Role, p.PID, err)
		}
	}
	if roles["opa"] != 2 || roles["guard"] != 1 {
		t.Errorf("processes: %+v (want 2 OPA servers, one per policy, and the guard)", res.Processes)
	}
	return res
}
