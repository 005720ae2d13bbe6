package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/server"
)

// loopPolicy is the runaway agent of issue 29: every call of spend is denied
// insufficient_budget, unscarred, and recorded.
const loopPolicy = `{"budget": 5, "tools": {"spend": {"cost": 10}, "read": {"cost": 0}}}`

func (e *env) agentWith(policy string) (string, *client.Client, string) {
	e.t.Helper()
	c, err := e.admin.CreateAgent(context.Background(), json.RawMessage(policy), "loop", "")
	if err != nil {
		e.t.Fatal(err)
	}
	cl := e.client(c.Token)
	cl.Retries = 0 // these tests see every 429
	return c.Agent, cl, c.Token
}

// TestAgentQuota429: over its quota an agent's call is refused 429
// too_many_requests with Retry-After, nothing is recorded, and it is counted;
// admins are not limited, and each agent has its own bucket. Pins D262 (the
// request quota of an agent's token).
func TestAgentQuota429(t *testing.T) {
	e := startWith(t, func(cfg *server.Config) { cfg.AgentRPS, cfg.AgentBurst = 0.5, 2 })
	agent, _, token := e.agentWith(loopPolicy)
	other, _, otherToken := e.agentWith(loopPolicy)
	body := `{"tool": "spend"}`
	path := "/v1/agents/" + agent + "/requests"
	for i := 0; i < 2; i++ {
		if st, m := e.raw("POST", path, token, body); st != 200 {
			t.Fatalf("call %d within the burst: %d %v", i, st, m)
		}
	}
	before := e.lines(agent)
	req, _ := http.NewRequest("POST", e.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || m["code"] != "too_many_requests" || resp.Header.Get("Retry-After") != "2" {
		t.Fatalf("over the quota: %d %v Retry-After %q; want 429 too_many_requests, Retry-After 2 (one call at 0.5/s)",
			resp.StatusCode, m, resp.Header.Get("Retry-After"))
	}
	if e.lines(agent) != before {
		t.Fatalf("a refused call was recorded: %d lines, was %d", e.lines(agent), before)
	}
	// Reads of its own state count too: every call of the token does.
	if st, _ := e.raw("GET", "/v1/agents/"+agent, token, ""); st != http.StatusTooManyRequests {
		t.Errorf("GET state over the quota: %d, want 429", st)
	}
	if n := e.metric("lineage_requests_throttled_total"); n != 2 {
		t.Errorf("lineage_requests_throttled_total = %v, want 2", n)
	}
	// Another agent's bucket is its own; an admin has none.
	if st, m := e.raw("POST", "/v1/agents/"+other+"/requests", otherToken, body); st != 200 {
		t.Errorf("another agent: %d %v", st, m)
	}
	for i := 0; i < 5; i++ {
		if st, m := e.raw("POST", path, e.tokens["admin"], body); st != 200 {
			t.Fatalf("admin call %d: %d %v", i, st, m)
		}
	}
}

// TestClientBacksOffOn429: the Go client waits the Retry-After of a 429 and
// sends the same request again, with the same id: one record; a Retry-After
// over MaxRetryAfter is returned at once as ErrTooManyRequests.
func TestClientBacksOffOn429(t *testing.T) {
	e := startWith(t, func(cfg *server.Config) { cfg.AgentRPS, cfg.AgentBurst = 1, 1 })
	agent, c, _ := e.agentWith(loopPolicy)
	c.Retries = 3
	if _, err := c.Request(bg, agent, lineage.Request{ID: "a", Tool: "read"}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	v, err := c.Request(bg, agent, lineage.Request{ID: "b", Tool: "read"})
	if err != nil || v.Decision != lineage.Allow || v.RequestID != "b" {
		t.Fatalf("after the back-off: %+v %v", v, err)
	}
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Errorf("the retry came after %v; Retry-After said 1 s", took)
	}
	if n := e.lines(agent); n != 4 {
		t.Errorf("%d records, want 4 (genesis, policy, a, b once)", n)
	}
	c.MaxRetryAfter = 500 * time.Millisecond
	_, err = c.Request(bg, agent, lineage.Request{ID: "c", Tool: "read"})
	if !errors.Is(err, lineage.ErrTooManyRequests) {
		t.Errorf("Retry-After over MaxRetryAfter: %v, want ErrTooManyRequests", err)
	}
}

// TestLoopingAgentQuota is issue 29's loop at the service: a client sending
// up to 1,000 requests a second for 2 s gets 429s, its log grows by no more
// than the quota, and another agent's latency is printed with and without the
// loop beside it. The quota is 20/s, burst 40, not the default 100/s, burst
// 200: the loop must outrun it on any machine, and a busy CI machine's
// durable decisions over HTTP may not reach 200 a second.
func TestLoopingAgentQuota(t *testing.T) {
	if testing.Short() {
		t.Skip("a 2 s load test")
	}
	const rps, burst = 20, 40
	e := startWith(t, func(cfg *server.Config) { cfg.AgentRPS, cfg.AgentBurst = rps, burst })
	loop, loopClient, _ := e.agentWith(loopPolicy)
	quiet, quietClient, _ := e.agentWith(loopPolicy)

	// The quiet agent's latency, sequential calls for a while: p50, p99.
	measure := func(d time.Duration) (time.Duration, time.Duration, int) {
		var lat []time.Duration
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			t0 := time.Now()
			if _, err := quietClient.Request(bg, quiet, lineage.Request{Tool: "read"}); err != nil {
				t.Fatalf("quiet agent: %v", err)
			}
			lat = append(lat, time.Since(t0))
			time.Sleep(100 * time.Millisecond) // under 10 calls a second: under its own quota
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		return lat[len(lat)/2], lat[len(lat)*99/100], len(lat)
	}
	p50Alone, p99Alone, nAlone := measure(2 * time.Second)

	var ok, throttled, other atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	loopStart := time.Now()
	linesBefore := e.lines(loop)
	const workers = 8
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(workers * time.Millisecond) // 1,000 a second in all
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				_, err := loopClient.Request(bg, loop, lineage.Request{Tool: "spend"})
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, lineage.ErrTooManyRequests):
					throttled.Add(1)
				default:
					other.Add(1)
				}
			}
		}()
	}
	p50Loop, p99Loop, nLoop := measure(2 * time.Second)
	close(stop)
	wg.Wait()
	elapsed := time.Since(loopStart)
	grown := e.lines(loop) - linesBefore
	sent := ok.Load() + throttled.Load() + other.Load()
	t.Logf("loop: %d requests in %v (%.0f/s): %d answered 200, %d refused 429, %d other errors; its log grew by %d records (quota allows %.0f)",
		sent, elapsed.Round(time.Millisecond), float64(sent)/elapsed.Seconds(), ok.Load(), throttled.Load(), other.Load(),
		grown, rps*elapsed.Seconds()+burst)
	t.Logf("another agent's latency:  alone p50 %v p99 %v (%d calls) | beside the loop p50 %v p99 %v (%d calls)",
		p50Alone.Round(time.Microsecond), p99Alone.Round(time.Microsecond), nAlone,
		p50Loop.Round(time.Microsecond), p99Loop.Round(time.Microsecond), nLoop)
	if other.Load() != 0 {
		t.Errorf("%d calls failed otherwise than 429", other.Load())
	}
	if throttled.Load() == 0 {
		t.Errorf("no 429 for %d requests in %v", sent, elapsed)
	}
	if limit := int(rps*elapsed.Seconds()) + burst + 1; grown > limit {
		t.Errorf("the log grew by %d records in %v, over the quota's %d", grown, elapsed, limit)
	}
	if int64(grown) != ok.Load() {
		t.Errorf("the log grew by %d records for %d answered requests", grown, ok.Load())
	}
	if p99Loop > 20*p99Alone+50*time.Millisecond {
		t.Errorf("the loop slowed another agent down: p99 %v beside it, %v alone", p99Loop, p99Alone)
	}
}

// TestApprovalNote: approve and reject take an optional note of at most 256
// characters, kept in the approval record and given with the request's
// verdict; anything else is 400 naming /note, and nothing is recorded. Pins
// D265 (the note of an approval).
func TestApprovalNote(t *testing.T) {
	e := start(t)
	agent, c := e.agent()
	for _, id := range []string{"w1", "w2", "w3"} {
		if v, err := c.Request(bg, agent, lineage.Request{ID: id, Tool: "wire"}); err != nil || v.Decision != lineage.Pending {
			t.Fatalf("%s: %+v %v", id, v, err)
		}
	}
	base := "/v1/agents/" + agent + "/requests/"
	before := e.lines(agent)
	for _, body := range []string{`{"note": 5}`, `{"note": null}`, `{"note": ["x"]}`,
		`{"note": "` + strings.Repeat("é", 257) + `"}`, `{"reason": "x"}`} {
		st, m := e.raw("POST", base+"w1/reject", e.tokens["approver"], body)
		msg, _ := m["message"].(string)
		if st != 400 || m["code"] != "bad_request" || !strings.HasPrefix(msg, "/") {
			t.Errorf("reject %s: %d %v; want 400 bad_request naming the field", body, st, m)
		}
		if !strings.Contains(body, "reason") && !strings.HasPrefix(msg, "/note") {
			t.Errorf("reject %s: message %q does not name /note", body, msg)
		}
	}
	if e.lines(agent) != before {
		t.Fatal("a refused rejection was recorded")
	}
	note256 := strings.Repeat("é", 256)
	v, err := e.approver.RejectWithNote(bg, agent, "w1", "not to that account: use the one on file")
	if err != nil || v.Reason != "approval_rejected" || v.Note != "not to that account: use the one on file" {
		t.Fatalf("reject with a note: %+v %v", v, err)
	}
	if v, err = e.approver.ApproveWithNote(bg, agent, "w2", note256); err != nil || v.Decision != lineage.Allow || v.Note != note256 {
		t.Fatalf("approve with a 256-character note: %+v %v", v, err)
	}
	if st, m := e.raw("POST", base+"w3/approve", e.tokens["approver"], `{}`); st != 200 || m["note"] != nil {
		t.Fatalf("approve with an empty body: %d %v", st, m)
	}
	// The agent reads the note with its verdict, and a retry gives it again.
	if v, err := c.Verdict(bg, agent, "w1", 0); err != nil || v.Note != "not to that account: use the one on file" {
		t.Errorf("the rejected request's verdict: %+v %v", v, err)
	}
	if v, err := c.Request(bg, agent, lineage.Request{ID: "w1", Tool: "wire"}); err != nil || v.Note == "" {
		t.Errorf("a retry of the rejected request: %+v %v", v, err)
	}
	// The record keeps it beside the verdict, and the log verifies.
	recs := served(t, e.admin, agent)
	var body lineage.ApprovalBody
	if err := json.Unmarshal(recs[5].Body, &body); err != nil || body.Note != "not to that account: use the one on file" || body.Verdict.Note != "" {
		t.Errorf("approval record: %s (%v)", recs[5].Body, err)
	}
	if !strings.Contains(string(recs[5].Body), `"approver":"alice","note":"not to that account`) {
		t.Errorf("approval record not canonical: %s", recs[5].Body)
	}
	if st, m := e.raw("GET", "/v1/agents/"+agent+"/verify", e.tokens["admin"], ""); st != 200 || m["ok"] != true {
		t.Errorf("verify: %d %v", st, m)
	}
}
