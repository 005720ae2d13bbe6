package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lineage-guard/lineage/api"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/runtime/store/file"
	"github.com/lineage-guard/lineage/server"
	"github.com/lineage-guard/lineage/server/servertest"
)

// max_pending 100: the checkpoint tests grow logs with pending requests.
const testPolicy = `{"budget": 10, "max_pending": 100, "tools": {
  "pay": {"cost": 1, "when": [{"expr": "args.amount <= 100", "reason": "too_much", "scar": "minor"}]},
  "wire": {"cost": 2, "requires_approval": true}}}`

// env is a real server on a free loopback port over a file store.
type env struct {
	t        testing.TB
	url      string
	dir      string
	admin    *client.Client
	approver *client.Client
	tokens   map[string]string // role → token
	srv      *server.Server
	logs     *syncBuffer
	agents   map[string]string // agent id → token
	store    *file.Store
	svc      *servertest.Service
	hs       *http.Server
}

func start(t testing.TB) *env { t.Helper(); return startWith(t, nil) }

// startWith is start with the config changed by edit first (nil: as is).
func startWith(t testing.TB, edit func(*server.Config)) *env {
	t.Helper()
	logs := &syncBuffer{}
	svc := servertest.Start(t, servertest.WithConfig(func(cfg *server.Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
		if edit != nil {
			edit(cfg)
		}
	}))
	e := &env{t: t, url: svc.URL, dir: svc.Dir, srv: svc.Server, logs: logs, store: svc.File, hs: svc.HTTP, svc: svc,
		tokens: map[string]string{"admin": svc.AdminToken, "approver": svc.ApproverToken}}
	e.admin = e.client(svc.AdminToken)
	e.approver = e.client(svc.ApproverToken)
	return e
}

func (e *env) client(token string) *client.Client {
	c, err := client.New(e.url, token, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// agent creates an agent and returns its id and a client with its token.
func (e *env) agent() (string, *client.Client) {
	e.t.Helper()
	c, err := e.admin.CreateAgent(context.Background(), json.RawMessage(testPolicy), "bot", "")
	if err != nil {
		e.t.Fatal(err)
	}
	if e.agents == nil {
		e.agents = map[string]string{}
	}
	e.agents[c.Agent] = c.Token
	return c.Agent, e.client(c.Token)
}

func (e *env) agentToken(agent string) string { return e.agents[agent] }

// raw sends a raw HTTP request and returns the status and the decoded error body.
func (e *env) raw(method, path, token, body string) (int, map[string]any) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

// lines counts the records in an agent's log file.
func (e *env) lines(agent string) int {
	b, err := os.ReadFile(filepath.Join(e.dir, agent+".jsonl"))
	if err != nil {
		e.t.Fatal(err)
	}
	return bytes.Count(b, []byte{'\n'})
}

var bg = context.Background()

func TestEndToEnd(t *testing.T) {
	e := start(t)
	agent, bot := e.agent()

	who, err := bot.WhoAmI(bg)
	if err != nil || who.Role != "agent" || who.Agent != agent {
		t.Fatalf("whoami: %+v %v", who, err)
	}
	if who, _ := e.approver.WhoAmI(bg); who.Name != "alice" || who.Role != "approver" {
		t.Errorf("approver whoami: %+v", who)
	}

	// Events: subscribe before anything happens.
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	events := make(chan api.Event, 16)
	go e.approver.Events(ctx, func(ev api.Event) error { events <- ev; return nil })
	time.Sleep(100 * time.Millisecond) // the stream is open once its first line arrived; see below
	v, err := bot.Request(bg, agent, lineage.Request{Tool: "pay", Args: map[string]any{"amount": json.Number("5")}})
	if err != nil || v.Decision != lineage.Allow || v.Cost != 1 || v.Seq != 2 {
		t.Fatalf("allow: %+v %v", v, err)
	}
	v, err = bot.Request(bg, agent, lineage.Request{Tool: "pay", Args: map[string]any{"amount": json.Number("500")}})
	if err != nil || v.Decision != lineage.Deny || v.Reason != "too_much" || v.Scar == nil {
		t.Fatalf("deny: %+v %v", v, err)
	}
	v, err = bot.Request(bg, agent, lineage.Request{ID: "w1", Tool: "wire"})
	if err != nil || v.Decision != lineage.Pending || v.RequestID != "w1" {
		t.Fatalf("pending: %+v %v", v, err)
	}
	if ev := <-events; ev.Type != "pending" || !strings.Contains(string(ev.Data), `"w1"`) {
		t.Errorf("first event: %s %s", ev.Type, ev.Data)
	}

	pend, err := e.approver.Pending(bg)
	if err != nil || len(pend) != 1 || pend[0].RequestID != "w1" || pend[0].Cost != 2 || pend[0].Name != "bot" || pend[0].At.IsZero() {
		t.Fatalf("pending list: %+v %v", pend, err)
	}

	// A held GET returns as soon as alice approves.
	done := make(chan lineage.Verdict, 1)
	go func() {
		v, err := bot.Verdict(bg, agent, "w1", 30*time.Second)
		if err != nil {
			t.Error(err)
		}
		done <- v
	}()
	time.Sleep(200 * time.Millisecond)
	ap, err := e.approver.Approve(bg, agent, "w1")
	if err != nil || ap.Decision != lineage.Allow || ap.Cost != 2 {
		t.Fatalf("approve: %+v %v", ap, err)
	}
	select {
	case held := <-done:
		if held != ap {
			t.Errorf("held GET: %+v, approval %+v", held, ap)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held GET did not return after the approval")
	}
	if ev := <-events; ev.Type != "decided" || !strings.Contains(string(ev.Data), `"alice"`) {
		t.Errorf("decided event: %s %s", ev.Type, ev.Data)
	}
	if _, err := e.approver.Approve(bg, agent, "w1"); !errors.Is(err, lineage.ErrNotPending) {
		t.Errorf("second approval: %v", err)
	}
	// An exact retry answers the same; another tool under that id conflicts.
	if v, err := bot.Request(bg, agent, lineage.Request{ID: "w1", Tool: "wire"}); err != nil || v.Decision != lineage.Allow {
		t.Errorf("retry after approval: %+v %v", v, err)
	}
	if _, err := bot.Request(bg, agent, lineage.Request{ID: "w1", Tool: "pay"}); !errors.Is(err, lineage.ErrIDConflict) {
		t.Errorf("id conflict across the wire: %v", err)
	}

	st, err := bot.State(bg, agent)
	if err != nil || st.Spent != 3 || st.ScarScore != 1 || st.Calls["wire"] != 1 {
		t.Fatalf("state: %+v %v", st, err)
	}
	digest, pol, err := bot.Policy(bg, agent)
	if err != nil || !strings.HasPrefix(digest, "sha256:") || !bytes.Contains(pol, []byte(`"wire"`)) {
		t.Errorf("policy: %s %s %v", digest, pol, err)
	}
	agents, err := e.approver.Agents(bg)
	if err != nil || len(agents) != 1 || agents[0].Name != "bot" || agents[0].Digest != digest {
		t.Errorf("agents: %+v %v", agents, err)
	}

	// The log, byte for byte, with the approver from the token.
	logBytes, err := e.approver.Log(bg, agent, 0)
	file, _ := os.ReadFile(filepath.Join(e.dir, agent+".jsonl"))
	if err != nil || !bytes.Equal(logBytes, file) {
		t.Fatalf("log differs from the file (%v):\n%s\n%s", err, logBytes, file)
	}
	if !bytes.Contains(logBytes, []byte(`"approver":"alice"`)) {
		t.Errorf("the approval record does not name alice:\n%s", logBytes)
	}
	tail, _ := e.approver.Log(bg, agent, 4)
	if bytes.Count(tail, []byte{'\n'}) != bytes.Count(file, []byte{'\n'})-4 {
		t.Errorf("log from 4:\n%s", tail)
	}
	vr, err := e.approver.Verify(bg, agent)
	if err != nil || !vr.OK || vr.Records == nil || *vr.Records != e.lines(agent) || vr.Head != st.Head {
		t.Errorf("verify: %+v %v", vr, err)
	}

	killed, err := e.approver.Terminate(bg, agent, "enough")
	if err != nil || killed.Status != lineage.Terminated || killed.Termination != lineage.Killed {
		t.Fatalf("terminate: %+v %v", killed, err)
	}
	if ev := <-events; ev.Type != "terminated" || !strings.Contains(string(ev.Data), `"alice"`) {
		t.Errorf("terminated event: %s %s", ev.Type, ev.Data)
	}
	last, _ := e.approver.Log(bg, agent, uint64(e.lines(agent)-1))
	if !bytes.Contains(last, []byte(`"by":"alice"`)) || !bytes.Contains(last, []byte(`"note":"enough"`)) {
		t.Errorf("termination record: %s", last)
	}
	if _, err := e.approver.Terminate(bg, agent, ""); !errors.Is(err, lineage.ErrSealed) {
		t.Errorf("second terminate: %v", err)
	}
	if _, err := bot.State(bg, "agt_nosuchagent"); !errors.Is(err, lineage.ErrForbidden) {
		t.Errorf("another agent's state with an agent token: %v", err)
	}
	if _, err := e.admin.State(bg, "agt_nosuchagent"); !errors.Is(err, lineage.ErrUnknownAgent) {
		t.Errorf("unknown agent: %v", err)
	}
	if _, err := e.admin.Verdict(bg, agent, "nope", 0); !errors.Is(err, lineage.ErrUnknownRequest) {
		t.Errorf("unknown request: %v", err)
	}
	if err := e.admin.Health(bg); err != nil {
		t.Errorf("health: %v", err)
	}

	resp, err := http.Get(e.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, name := range []string{`lineage_decisions_total{decision="allow",reason="ok"} 3`, "lineage_decision_duration_seconds_bucket",
		"lineage_store_sync_duration_seconds", "lineage_pending_requests 0", "lineage_agents_loaded 1",
		`lineage_http_requests_total{code="200",route="/v1/agents/{agent}/requests"}`, "go_goroutines"} {
		if !bytes.Contains(m, []byte(name)) {
			t.Errorf("metrics lack %s", name)
		}
	}
	for _, tok := range e.tokens {
		if strings.Contains(e.logs.String(), tok) {
			t.Errorf("a token is in the request log")
		}
	}
	if !strings.Contains(e.logs.String(), "principal=alice") {
		t.Errorf("the request log does not name the principal:\n%s", e.logs.String())
	}
}

func TestWaitEndsAtItsTime(t *testing.T) {
	e := start(t)
	agent, bot := e.agent()
	if _, err := bot.Request(bg, agent, lineage.Request{ID: "w", Tool: "wire"}); err != nil {
		t.Fatal(err)
	}
	v, err := bot.Verdict(bg, agent, "w", 300*time.Millisecond)
	if err != nil || v.Decision != lineage.Pending {
		t.Fatalf("%+v %v", v, err)
	}
	for _, bad := range []string{"61s", "-1s", "soon"} {
		if code, body := e.raw("GET", "/v1/agents/"+agent+"/requests/w?wait="+bad, e.tokens["admin"], ""); code != 400 || body["code"] != "bad_request" {
			t.Errorf("wait=%s: %d %v", bad, code, body)
		}
	}
	// Terminating the agent ends a wait: its pending request is void.
	done := make(chan lineage.Verdict, 1)
	go func() { v, _ := bot.Verdict(bg, agent, "w", 30*time.Second); done <- v }()
	time.Sleep(200 * time.Millisecond)
	if _, err := e.approver.Terminate(bg, agent, ""); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-done:
		if v.Decision != lineage.Deny || v.Reason != "terminated" {
			t.Errorf("after terminate: %+v", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the wait did not end at termination")
	}
}

// syncBuffer is a log sink the server writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestStoreGone: once the store cannot be written, requests are 503
// unavailable, /health says so, and nothing is acknowledged.
func TestStoreGone(t *testing.T) {
	e := start(t)
	agent, bot := e.agent()
	before := e.lines(agent)
	if err := e.store.Close(); err != nil {
		t.Fatal(err)
	}
	bot.Retries = 0
	_, err := bot.Request(bg, agent, lineage.Request{Tool: "pay", Args: map[string]any{"amount": json.Number("1")}})
	var ce *api.Error
	if !errors.Is(err, lineage.ErrServiceUnavailable) || !errors.As(err, &ce) || ce.Status != 503 {
		t.Errorf("request on a closed store: %v", err)
	}
	if err := e.admin.Health(bg); !errors.Is(err, lineage.ErrServiceUnavailable) {
		t.Errorf("health on a closed store: %v", err)
	}
	if got := e.lines(agent); got != before {
		t.Errorf("%d records after the failure, were %d", got, before)
	}
}

// TestShutdownEndsStreamsAndWaits: Shutdown returns promptly although an
// event stream and a held request are open; the held one gets its verdict.
func TestShutdownEndsStreamsAndWaits(t *testing.T) {
	e := start(t)
	agent, bot := e.agent()
	if _, err := bot.Request(bg, agent, lineage.Request{ID: "w", Tool: "wire"}); err != nil {
		t.Fatal(err)
	}
	streamDone := make(chan error, 1)
	go func() { streamDone <- e.approver.Events(bg, func(api.Event) error { return nil }) }()
	held := make(chan lineage.Verdict, 1)
	go func() { v, _ := bot.Verdict(bg, agent, "w", 60*time.Second); held <- v }()
	time.Sleep(300 * time.Millisecond)
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := e.hs.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v after %v", err, time.Since(start))
	}
	select {
	case v := <-held:
		if v.Decision != lineage.Pending {
			t.Errorf("held request at shutdown: %+v", v)
		}
	case <-time.After(5 * time.Second):
		t.Error("the held request did not end at shutdown")
	}
	select {
	case <-streamDone:
	case <-time.After(5 * time.Second):
		t.Error("the event stream did not end at shutdown")
	}
}
