package bench

// wrk as the load of the deployed benchmark (issue 20: "the load from a
// third process (its own or wrk when installed)"): a C process that costs
// the shared machine less a request than the builtin Go load (about half,
// docs/performance.md: the two loads), driving the same requests with a
// script this file generates (wrkload.lua): D415 (bench serve's load from
// wrk), D416 (wrk and OPA's two servers).

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/lineage-guard/lineage/api"
)

//go:embed wrkload.lua
var wrkLua string

// wrkMark starts the line of wrk's output that the script's done() writes.
const wrkMark = "lineage-bench-wrk "

// wrkQuantiles is how many quantiles of wrk's latency distribution a round
// reports: a decision's latency is read back from them (wrkRun.latencies).
const wrkQuantiles = 1000

// wrkTimeout is wrk's --timeout: an answer slower than this is a timeout
// error, which fails the round.
const wrkTimeout = "10s"

// WrkName is what a row calls the load wrk at path drove: "wrk" and its
// version from `wrk -v` ("wrk 4.1.0"), or an error when path is no wrk.
func WrkName(path string) (string, error) {
	// wrk -v prints its version, then its usage (no URL), and exits 1.
	out, _ := exec.Command(path, "-v").CombinedOutput()
	m := regexp.MustCompile(`(?m)^wrk \S*?(\d+(?:\.\d+)+)`).FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("bench serve: %s -v does not say a wrk version: %q", path, strings.TrimSpace(string(out)))
	}
	return "wrk " + string(m[1]), nil
}

// wrkRequest is one HTTP request of an agent, as the script sends it.
type wrkRequest struct {
	Method, Path string
	Auth         string // the Authorization header; "" for none
	Body         string // "" for none
}

// wrkRun is what one wrk process measured, as its script's done() writes it.
type wrkRun struct {
	Requests   int64   `json:"requests"`
	DurationUS int64   `json:"duration_us"`
	FirstUS    float64 `json:"first_us"` // CLOCK_MONOTONIC, the first request sent
	LastUS     float64 `json:"last_us"`  // and the last answer read
	Errors     struct {
		Connect   int64            `json:"connect"`
		Read      int64            `json:"read"`
		Write     int64            `json:"write"`
		Timeout   int64            `json:"timeout"`
		Status    int64            `json:"status"` // wrk's count of statuses over 399
		Non2xx    map[string]int64 `json:"non_2xx"`
		NoVerdict int64            `json:"no_verdict"` // 2xx answers without a verdict
	} `json:"errors"`
	P50US     float64   `json:"p50_us"`
	P99US     float64   `json:"p99_us"`
	Quantiles []float64 `json:"quantiles_us"`
}

// err is the round's failure: any socket error, timeout, answer other than
// 2xx, or answer without a verdict; or no decision at all.
func (r *wrkRun) err() error {
	e := r.Errors
	var bad []string
	if n := e.Connect + e.Read + e.Write; n > 0 {
		bad = append(bad, fmt.Sprintf("socket errors (connect %d, read %d, write %d)", e.Connect, e.Read, e.Write))
	}
	if e.Timeout > 0 {
		bad = append(bad, fmt.Sprintf("%d answers slower than %s", e.Timeout, wrkTimeout))
	}
	if len(e.Non2xx) > 0 {
		codes := make([]string, 0, len(e.Non2xx))
		for c, n := range e.Non2xx {
			codes = append(codes, fmt.Sprintf("%s: %d", c, n))
		}
		sort.Strings(codes)
		bad = append(bad, "answers other than 2xx ("+strings.Join(codes, ", ")+")")
	}
	if e.NoVerdict > 0 {
		bad = append(bad, fmt.Sprintf("%d answers without a verdict", e.NoVerdict))
	}
	if r.Requests == 0 || r.LastUS <= r.FirstUS {
		bad = append(bad, "no decision")
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

// latencies are the round's decisions' latencies as wrk's distribution
// gives them: decision j of n takes reported quantile ⌊j·Q/n⌋ of the Q the
// script reports (the one at (⌊j·Q/n⌋+½)/Q: within 1/Q of j/n). wrk's
// distribution is corrected for coordinated omission (an answer slower than
// the mean interval a connection stands for samples it held back), as wrk's
// own percentiles are.
func (r *wrkRun) latencies() []int64 {
	n := int(r.Requests)
	out := make([]int64, n)
	for j := range out {
		out[j] = int64(r.Quantiles[j*len(r.Quantiles)/n] * 1e3)
	}
	return out
}

// wrkThreads is wrk's -t for conns connections: the most threads, at most
// one a CPU, that share the connections evenly (wrk gives each thread
// conns / threads of them).
func wrkThreads(conns int) int {
	for t := min(conns, goruntime.NumCPU()); t > 1; t-- {
		if conns%t == 0 {
			return t
		}
	}
	return 1
}

// wrkSeconds is a duration as wrk takes it: whole seconds, at least one.
func wrkSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

// startWrk writes agents' requests and the script into dir (files named
// after name) and starts wrk on base with conns connections for secs
// seconds; guard says the answers are the guard's verdicts (each naming
// its request) rather than OPA's.
func startWrk(ctx context.Context, exe, dir, name, base string, agents [][]wrkRequest, guard bool, conns, secs int) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer, error) {
	var data bytes.Buffer
	for i, reqs := range agents {
		for _, r := range reqs {
			for _, f := range []string{r.Method, r.Path, r.Auth, r.Body} {
				if strings.ContainsAny(f, "\t\n\r") {
					return nil, nil, nil, fmt.Errorf("bench serve: a request of agent %d does not fit wrk's script (%q)", i, f)
				}
			}
			fmt.Fprintf(&data, "%d\t%s\t%s\t%s\t%s\n", i, r.Method, r.Path, r.Auth, r.Body)
		}
	}
	dataFile, script := filepath.Join(dir, name+".requests"), filepath.Join(dir, name+".lua")
	threads := wrkThreads(conns)
	head := fmt.Sprintf("DATA = %q\nTHREADS = %d\nGUARD = %t\nQUANTILES = %d\nMARK = %q\n", dataFile, threads, guard, wrkQuantiles, wrkMark)
	if err := os.WriteFile(dataFile, data.Bytes(), 0o600); err != nil {
		return nil, nil, nil, err
	}
	if err := os.WriteFile(script, []byte(head+wrkLua), 0o600); err != nil {
		return nil, nil, nil, err
	}
	cmd := exec.CommandContext(ctx, exe, "-t", strconv.Itoa(threads), "-c", strconv.Itoa(conns), "-d", strconv.Itoa(secs)+"s",
		"--timeout", wrkTimeout, "--latency", "-s", script, strings.TrimSuffix(base, "/")+"/")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return nil, nil, nil, fmt.Errorf("bench serve: starting wrk: %w", err)
	}
	return cmd, &stdout, &stderr, nil
}

// waitWrk waits for a wrk that startWrk started and reads its script's line.
func waitWrk(cmd *exec.Cmd, stdout, stderr *bytes.Buffer) (*wrkRun, error) {
	werr := cmd.Wait()
	out := stdout.String()
	i := strings.LastIndex(out, wrkMark)
	if werr != nil || i < 0 {
		return nil, fmt.Errorf("wrk (%s): %v\n%s%s", strings.Join(cmd.Args, " "), werr, out, strings.TrimSpace(stderr.String()))
	}
	line, _, _ := strings.Cut(out[i+len(wrkMark):], "\n")
	var r wrkRun
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return nil, fmt.Errorf("wrk's result %q: %w", line, err)
	}
	if err := r.err(); err != nil {
		return nil, fmt.Errorf("wrk (%s): %w\n%s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(stderr.String()))
	}
	if len(r.Quantiles) != wrkQuantiles {
		return nil, fmt.Errorf("wrk's result has %d quantiles, not %d", len(r.Quantiles), wrkQuantiles)
	}
	return &r, nil
}

// wrkTarget is one server process wrk drives: its base URL and the
// requests of the agents it serves.
type wrkTarget struct {
	base   string
	agents [][]wrkRequest
}

// runWrk drives one round of targets (the guard; or OPA's servers, one a
// policy) with wrk and reads the CPU time of pids around it. Every target
// gets its own wrk (wrk drives one host:port): with at least one
// connection each they run at the same time, sharing conns (and each at
// most one connection an agent); with fewer connections than targets
// (one connection, two OPA servers) they run one after the other, each for
// its share of d, so that one request at a time is in flight throughout.
// started is told each wrk's PID.
func runWrk(ctx context.Context, exe, dir string, targets []wrkTarget, guard bool, pids []int, conns int, d time.Duration, started func(pid int)) (*LoadResult, error) {
	together := conns >= len(targets)
	before := cpuOf(pids)
	var runs []*wrkRun
	type process struct {
		cmd            *exec.Cmd
		stdout, stderr *bytes.Buffer
	}
	var live []process
	defer func() { // on an error, no wrk outlives the round
		for _, s := range live {
			if s.cmd.ProcessState == nil {
				_ = s.cmd.Process.Kill()
				_ = s.cmd.Wait()
			}
		}
	}()
	for i, t := range targets {
		c, secs := conns, wrkSeconds(d)
		if together {
			c = conns/len(targets) + btoi(i < conns%len(targets))
		} else {
			secs = wrkSeconds(d / time.Duration(len(targets)))
		}
		c = min(c, len(t.agents))
		if c < 1 {
			continue
		}
		cmd, stdout, stderr, err := startWrk(ctx, exe, dir, fmt.Sprintf("wrk-%d", i), t.base, t.agents, guard, c, secs)
		if err != nil {
			return nil, err
		}
		started(cmd.Process.Pid)
		live = append(live, process{cmd, stdout, stderr})
		if together {
			continue
		}
		r, err := waitWrk(cmd, stdout, stderr)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	if together {
		for _, s := range live {
			r, err := waitWrk(s.cmd, s.stdout, s.stderr)
			if err != nil {
				return nil, err
			}
			runs = append(runs, r)
		}
	}
	after := cpuOf(pids)
	res := &LoadResult{CPU: -1}
	if before >= 0 && after >= 0 && len(pids) > 0 {
		res.CPU = int64(after - before)
	}
	for _, s := range live {
		res.LoadCPU += int64(processCPU(s.cmd.ProcessState))
	}
	first, last := math.Inf(1), 0.0
	for _, r := range runs {
		res.Latencies = append(res.Latencies, r.latencies()...)
		if together { // the windows overlap: their union
			first, last = min(first, r.FirstUS), max(last, r.LastUS)
		} else {
			res.Wall += int64((r.LastUS - r.FirstUS) * 1e3)
		}
	}
	if together {
		res.Wall = int64((last - first) * 1e3)
	}
	if len(res.Latencies) == 0 || res.Wall <= 0 {
		return nil, errors.New("wrk made no decision")
	}
	return res, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// opaWrkTargets are OPA's servers as wrk drives them: each policy's
// server (bases, by policy) and the recorded inputs of its agents (agent i
// runs policy i % len(ws)), posted to its data API.
func opaWrkTargets(ws []*workload, bases []string, inputs [][][]byte) []wrkTarget {
	targets := make([]wrkTarget, len(ws))
	for p, w := range ws {
		targets[p].base = bases[p]
		for i := p; i < len(inputs); i += len(ws) {
			reqs := make([]wrkRequest, len(inputs[i]))
			for k, in := range inputs[i] {
				reqs[k] = wrkRequest{Method: "POST", Path: opaPath(w.compiled), Body: string(in)}
			}
			targets[p].agents = append(targets[p].agents, reqs)
		}
	}
	return targets
}

// guardWrkRequests are the HTTP requests of the guard's fresh agents
// (created, as the admin with token adminTok) making the decisions of
// resolved, in order: requests as the agent, with its token, approvals as
// the admin. Every request of agent i is named "a<i>-<k>" (k its place),
// which the script reads back from the verdict to tell the agents apart;
// an approval names the request it approves.
func guardWrkRequests(created []api.Created, adminTok string, resolved [][]op) ([][]wrkRequest, error) {
	out := make([][]wrkRequest, len(created))
	for i, c := range created {
		base := "/v1/agents/" + url.PathEscape(c.Agent) + "/requests"
		names := map[string]string{} // the workload's request id → its name here
		for k, o := range resolved[i] {
			name := fmt.Sprintf("a%d-%d", i, k)
			if o.approve {
				pending, ok := names[o.req.ID]
				if !ok {
					return nil, fmt.Errorf("bench serve: agent %d approves %q before requesting it", i, o.req.ID)
				}
				out[i] = append(out[i], wrkRequest{Method: "POST", Path: base + "/" + url.PathEscape(pending) + "/approve", Auth: "Bearer " + adminTok})
				continue
			}
			if o.req.ID != "" {
				names[o.req.ID] = name
			}
			body, err := json.Marshal(api.RequestBody{ID: name, Tool: o.req.Tool, Args: o.req.Args})
			if err != nil {
				return nil, err
			}
			out[i] = append(out[i], wrkRequest{Method: "POST", Path: base, Auth: "Bearer " + c.Token, Body: string(body)})
		}
	}
	return out, nil
}
