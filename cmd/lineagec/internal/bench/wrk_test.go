package bench

import (
	"context"
	"encoding/json"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/lineage-guard/lineage/api"
)

// TestWrkThreads: wrk's threads divide the connections (wrk gives each
// thread connections / threads), one a CPU at most, as many as can be.
func TestWrkThreads(t *testing.T) {
	for c := 1; c <= 70; c++ {
		n := wrkThreads(c)
		if n < 1 || c%n != 0 || n > goruntime.NumCPU() {
			t.Fatalf("%d connections: %d threads", c, n)
		}
		for m := n + 1; m <= min(c, goruntime.NumCPU()); m++ {
			if c%m == 0 {
				t.Errorf("%d connections: %d threads, %d divide them too", c, n, m)
			}
		}
	}
	if wrkSeconds(300e6) != 1 || wrkSeconds(4e9) != 4 || wrkSeconds(4.2e9) != 5 {
		t.Error("wrk's seconds are not the duration rounded up, at least 1")
	}
}

// TestWrkRunErr: a round fails on anything but 2xx answers with verdicts,
// and its latencies follow wrk's quantiles, one a decision.
func TestWrkRunErr(t *testing.T) {
	ok := func() *wrkRun {
		var r wrkRun
		if err := json.Unmarshal([]byte(`{"requests":4,"duration_us":1000000,"first_us":10,"last_us":20,"errors":{"connect":0,"read":0,"write":0,"timeout":0,"status":0,"non_2xx":{},"no_verdict":0},"p50_us":2,"p99_us":4}`), &r); err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= wrkQuantiles; i++ {
			r.Quantiles = append(r.Quantiles, float64(i))
		}
		return &r
	}
	if err := ok().err(); err != nil {
		t.Fatal(err)
	}
	if l := ok().latencies(); len(l) != 4 || l[0] != 1e3 || l[3] != 751e3 {
		t.Errorf("latencies %v", l)
	}
	for want, spoil := range map[string]func(r *wrkRun){
		"(409: 2, 500: 1)":     func(r *wrkRun) { r.Errors.Non2xx = map[string]int64{"500": 1, "409": 2} },
		"read 1":               func(r *wrkRun) { r.Errors.Read = 1 },
		"3 answers slower":     func(r *wrkRun) { r.Errors.Timeout = 3 },
		"1 answers without":    func(r *wrkRun) { r.Errors.NoVerdict = 1 },
		"no decision":          func(r *wrkRun) { r.Requests = 0 },
		"no decision ":         func(r *wrkRun) { r.LastUS = r.FirstUS },
		"(connect 1, read 0, ": func(r *wrkRun) { r.Errors.Connect = 1 },
	} {
		r := ok()
		spoil(r)
		if err := r.err(); err == nil || !strings.Contains(err.Error(), strings.TrimSpace(want)) {
			t.Errorf("want an error with %q, got %v", want, err)
		}
	}
}

// TestGuardWrkRequests: the guard's requests as wrk sends them are the
// recorded decisions as they resolved, each named after its agent and
// place; an approval names the request it approves, which came before it.
func TestGuardWrkRequests(t *testing.T) {
	ws, err := serveWorkloads()
	if err != nil {
		t.Fatal(err)
	}
	runs := serveRuns(ws, 4, 40)
	_, resolved, mix, err := recordInputs(context.Background(), runs)
	if err != nil {
		t.Fatal(err)
	}
	if mix.Pending == 0 {
		t.Fatal("no pending decision to approve")
	}
	created := make([]api.Created, len(runs))
	for i := range created {
		created[i] = api.Created{Agent: "ag" + string(rune('A'+i)), Token: "tok" + string(rune('A'+i))}
	}
	reqs, err := guardWrkRequests(created, "admin", resolved)
	if err != nil {
		t.Fatal(err)
	}
	approvals := 0
	for i, rs := range reqs {
		if len(rs) != 40 {
			t.Fatalf("agent %d: %d requests", i, len(rs))
		}
		sent := map[string]bool{}
		for k, r := range rs {
			base := "/v1/agents/" + created[i].Agent + "/requests"
			if r.Body == "" {
				approvals++
				id, ok := strings.CutSuffix(strings.TrimPrefix(r.Path, base+"/"), "/approve")
				if !ok || !sent[id] || r.Auth != "Bearer admin" || r.Method != "POST" {
					t.Errorf("agent %d request %d: %+v", i, k, r)
				}
				continue
			}
			var b api.RequestBody
			if err := json.Unmarshal([]byte(r.Body), &b); err != nil {
				t.Fatal(err)
			}
			if r.Path != base || r.Auth != "Bearer "+created[i].Token || b.ID != "a"+strconv.Itoa(i)+"-"+strconv.Itoa(k) || b.Tool == "" {
				t.Errorf("agent %d request %d: %+v", i, k, r)
			}
			sent[b.ID] = true
		}
	}
	if approvals == 0 || approvals > mix.Pending { // the last of an agent's may be left pending
		t.Errorf("%d approvals for %d pending decisions", approvals, mix.Pending)
	}
	// An approval of a request never made is refused.
	bad := [][]op{{{approve: true}}}
	bad[0][0].req.ID = "nope"
	if _, err := guardWrkRequests(created[:1], "admin", bad); err == nil {
		t.Error("an approval of an unknown request was accepted")
	}
}
