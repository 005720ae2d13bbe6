package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lineage-guard/lineage/api"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store/memory"
	"github.com/lineage-guard/lineage/server/servertest"
)

var bg = context.Background()

// serve starts a real server over a memory store on a loopback port and
// returns its URL, an admin token and the runtime (to read the log).
func serve(t *testing.T, wrap func(http.Handler) http.Handler) (string, string, *runtime.Runtime) {
	t.Helper()
	svc := servertest.Start(t, servertest.WithStore(memory.New()), servertest.WithHandler(wrap))
	return svc.URL, svc.AdminToken, svc.Runtime
}

const pol = `{"budget": 10, "tools": {"t": {"cost": 1}, "w": {"cost": 1, "requires_approval": true}}}`

func TestErrorsAcrossTheWire(t *testing.T) {
	u, tok, _ := serve(t, nil)
	admin, _ := client.New(u, tok, nil)
	_, err := admin.CreateAgent(bg, json.RawMessage(`{"budget": 1, "tools": {}, "scar_limt": 2}`), "", "")
	var ce *api.Error
	if !errors.Is(err, lineage.ErrInvalidPolicy) || !errors.As(err, &ce) || len(ce.Errors) != 1 || ce.Errors[0].Pointer != "/scar_limt" || ce.Status != 400 {
		t.Errorf("invalid policy: %#v", err)
	}
	c, err := admin.CreateAgent(bg, json.RawMessage(pol), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Request(bg, c.Agent, lineage.Request{Tool: "bad tool"}); !errors.Is(err, lineage.ErrBadRequest) {
		t.Errorf("bad tool: %v", err)
	}
	if _, err := admin.Request(bg, c.Agent, lineage.Request{Tool: "t", At: time.Now()}); !errors.Is(err, lineage.ErrBadRequest) {
		t.Errorf("a time: %v", err)
	}
	if _, err := admin.Reject(bg, c.Agent, "nope"); !errors.Is(err, lineage.ErrNotPending) || !errors.Is(err, lineage.ErrUnknownRequest) ||
		!errors.As(err, &ce) || ce.Status != 404 {
		t.Errorf("reject unknown: %v (D303: unknown_request, 404, and not pending)", err)
	}
	nobody, _ := client.New(u, "", nil)
	if _, err := nobody.WhoAmI(bg); !errors.Is(err, lineage.ErrUnauthorized) {
		t.Errorf("no token: %v", err)
	}
	bot, _ := client.New(u, c.Token, nil)
	if _, err := bot.Pending(bg); !errors.Is(err, lineage.ErrForbidden) || errors.Is(err, lineage.ErrUnauthorized) {
		t.Errorf("agent lists pending: %v", err)
	}
	// An id the API could not address in a path is malformed (D233, request
	// ids a path can hold); every character an id may hold travels as it is.
	if _, err := bot.Request(bg, c.Agent, lineage.Request{ID: "a/b ?#%", Tool: "w"}); !errors.Is(err, lineage.ErrBadRequest) {
		t.Errorf("odd id: %v, want bad_request", err)
	}
	const odd = "a.b~c:d-e_F9"
	v, err := bot.Request(bg, c.Agent, lineage.Request{ID: odd, Tool: "w"})
	if err != nil || v.RequestID != odd {
		t.Fatalf("id %s: %+v %v", odd, v, err)
	}
	if got, err := bot.Verdict(bg, c.Agent, odd, 0); err != nil || got != v {
		t.Errorf("verdict of an odd id: %+v %v", got, err)
	}
	if got, err := admin.Approve(bg, c.Agent, odd); err != nil || got.Decision != lineage.Allow {
		t.Errorf("approve an odd id: %+v %v", got, err)
	}
	if _, err := client.New("ftp://x", "", nil); err == nil {
		t.Error("an ftp URL was accepted")
	}
}

func TestRetries(t *testing.T) {
	var calls atomic.Int32
	var failing atomic.Int32
	var lost atomic.Int32 // answers lost after the commit: 503 unknown_outcome
	u, tok, rt := serve(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if lost.Load() > 0 {
				lost.Add(-1)
				calls.Add(1)
				h.ServeHTTP(httptest.NewRecorder(), r)
				w.WriteHeader(http.StatusServiceUnavailable)
				w.Write([]byte(`{"code":"unknown_outcome","message":"the commit was not confirmed"}`))
				return
			}
			if failing.Load() > 0 {
				failing.Add(-1)
				calls.Add(1)
				w.WriteHeader(http.StatusServiceUnavailable)
				w.Write([]byte(`{"code":"unavailable","message":"try again"}`))
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	admin, _ := client.New(u, tok, nil)
	c, err := admin.CreateAgent(bg, json.RawMessage(pol), "", "")
	if err != nil {
		t.Fatal(err)
	}
	// A request with an id is retried, and recorded once.
	failing.Store(2)
	v, err := admin.Request(bg, c.Agent, lineage.Request{ID: "r1", Tool: "t"})
	if err != nil || v.Decision != lineage.Allow || calls.Load() != 2 {
		t.Fatalf("retried request: %+v %v after %d failures", v, err, calls.Load())
	}
	// A request without an id is given one, so it is retried too (D351 (the
	// Go client names every request)); and an answer lost after the commit
	// (unknown_outcome) is resolved by the retry: one record per call.
	calls.Store(0)
	failing.Store(1)
	v2, err := admin.Request(bg, c.Agent, lineage.Request{Tool: "t"})
	if err != nil || calls.Load() != 1 || !strings.HasPrefix(v2.RequestID, "go_") {
		t.Errorf("request without id: %+v %v after %d failures", v2, err, calls.Load())
	}
	calls.Store(0)
	lost.Store(2)
	v3, err := admin.Request(bg, c.Agent, lineage.Request{Tool: "t"})
	if err != nil || calls.Load() != 2 || v3.Decision != lineage.Allow {
		t.Errorf("request whose answers were lost: %+v %v after %d lost answers", v3, err, calls.Load())
	}
	recs, err := rt.Records(c.Agent)
	if err != nil || len(recs) != 5 {
		t.Errorf("the log has %d records (%v), want genesis, policy and three actions", len(recs), err)
	}
	lost.Store(10)
	admin.Retries = 1
	if _, err := admin.Request(bg, c.Agent, lineage.Request{Tool: "t"}); !errors.Is(err, lineage.ErrUnknownOutcome) {
		t.Errorf("request after the retries: %v, want unknown_outcome", err)
	}
	lost.Store(0)
	admin.Retries = 3
	// Reads are retried; more failures than retries surface as unavailable.
	failing.Store(10)
	admin.Retries = 2
	if _, err := admin.State(bg, c.Agent); !errors.Is(err, lineage.ErrServiceUnavailable) {
		t.Errorf("state after the retries: %v", err)
	}
	if left := failing.Load(); left != 7 {
		t.Errorf("state made %d attempts, want 3", 10-left)
	}
}

func TestContextDeadline(t *testing.T) {
	u, tok, _ := serve(t, nil)
	admin, _ := client.New(u, tok, nil)
	c, err := admin.CreateAgent(bg, json.RawMessage(pol), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Request(bg, c.Agent, lineage.Request{ID: "w", Tool: "w"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = admin.Verdict(ctx, c.Agent, "w", 30*time.Second)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 10*time.Second {
		t.Errorf("a held verdict past the deadline: %v after %v", err, time.Since(start))
	}
	// The server is still fine afterwards, and the request still pending.
	if v, err := admin.Verdict(bg, c.Agent, "w", 0); err != nil || v.Decision != lineage.Pending {
		t.Errorf("%+v %v", v, err)
	}
}
