package runtime_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/runtime"
)

// TestDecodeJSONStrict: the one decoder of request JSON text refuses what
// encoding/json lets through silently (docs/decision-order.md): duplicate keys at any depth
// and lone surrogates, escaped or raw.
func TestDecodeJSONStrict(t *testing.T) {
	bad := map[string]string{
		`{"a":1,"a":2}`:                   "/a",
		`{"x":{"b":1,"b":1}}`:             "/x/b",
		`{"x":[{"k":1},{"k":2,"k":3}]}`:   "/x/1/k",
		`{"s":"\ud800"}`:                  "/s",
		`{"s":"a\udc00b"}`:                "/s",
		`{"s":"\ud800\u0041"}`:            "/s",
		`{"s":"\ud800\\udc00"}`:           "/s",
		`{"\udfff":1}`:                    "lone surrogate",
		`{"s":["ok","\uD83D"]}`:           "/s/1",
		"{\"s\":\"\xed\xa0\x80\"}":        "UTF-8",
		"{\"s\":\"\xff\"}":                "UTF-8",
		`{"a":1}{"b":2}`:                  "after",
		`[1,2`:                            "not JSON",
		`{"a":1,"b":{"c":2,"c":{"d":3}}}`: "/b/c",
	}
	for text, where := range bad {
		v, err := runtime.DecodeJSON([]byte(text))
		if !errors.Is(err, lineage.ErrBadRequest) || !strings.Contains(err.Error(), where) {
			t.Errorf("DecodeJSON(%q) = %v, %v; want bad_request naming %q", text, v, err, where)
		}
		if m, err := runtime.ParseArgs(text); !errors.Is(err, lineage.ErrBadRequest) {
			t.Errorf("ParseArgs(%q) = %v, %v; want bad_request", text, m, err)
		}
	}
	good := map[string]any{
		`{"s":"\ud83d\ude00"}`:      map[string]any{"s": "😀"},
		`{"s":"\\ud800"}`:           map[string]any{"s": `\ud800`},
		`{"s":"\\\ud83d\ude00x"}`:   map[string]any{"s": `\😀x`},
		`{"a":{"k":1},"b":{"k":2}}`: map[string]any{"a": map[string]any{"k": json.Number("1")}, "b": map[string]any{"k": json.Number("2")}},
		`[{"k":1},{"k":1}]`:         []any{map[string]any{"k": json.Number("1")}, map[string]any{"k": json.Number("1")}},
		`{"s":"\u00e9\n"}`:          map[string]any{"s": "é\n"},
	}
	for text, want := range good {
		got, err := runtime.DecodeJSON([]byte(text))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("DecodeJSON(%q) = %#v, %v; want %#v", text, got, err, want)
		}
	}
}

// TestDecodeRequest: a request body as the service receives it.
func TestDecodeRequest(t *testing.T) {
	req, err := runtime.DecodeRequest([]byte(`{"id":"r1","tool":"pay","args":{"n":1},"at":"2026-01-01T00:00:01.5Z"}`))
	want := lineage.Request{ID: "r1", Tool: "pay", Args: map[string]any{"n": json.Number("1")}, At: sec(1.5)}
	if err != nil || !reflect.DeepEqual(req, want) {
		t.Fatalf("DecodeRequest = %+v, %v; want %+v", req, err, want)
	}
	for _, text := range []string{
		`{"tool":"pay","tool":"pay"}`, `{"tool":"pay","args":{"a":1,"a":1}}`, `{"tool":"pay","args":[]}`,
		`{"tool":1}`, `{"tool":"pay now"}`, `{}`, `{"tool":"pay","id":7}`, `{"tool":"pay","extra":1}`,
		`{"tool":"pay","at":"2318-01-01T00:00:00Z"}`, `{"tool":"pay","at":"yesterday"}`, `{"tool":"pay","at":5}`,
		`{"tool":"pay","args":{"s":"\udead"}}`, `[]`,
	} {
		if req, err := runtime.DecodeRequest([]byte(text)); !errors.Is(err, lineage.ErrBadRequest) {
			t.Errorf("DecodeRequest(%s) = %+v, %v; want bad_request", text, req, err)
		}
	}
}

// TestTimesTheRuntimeHolds: a time the runtime cannot keep exactly as int64
// nanoseconds since 1970 (record, window, at_ns) is a malformed request and
// nothing is recorded; 1970 through 2262-04-11 work (docs/decision-order.md, D50).
func TestTimesTheRuntimeHolds(t *testing.T) {
	st := newMem()
	rt := runtime.Open(st, opts("times"))
	c := mustCompileYAML(t, `
budget: 100
rate_limit: {max_actions: 1, window_secs: 60}
tools: {pay: {cost: 1}}
`)
	agent := mustCreate(t, rt, c, runtime.CreateOptions{At: time.Unix(0, 0)})
	year := func(y int) time.Time { return time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC) }
	for _, at := range []time.Time{time.Unix(0, 0), year(2026), year(2200), runtime.Latest} {
		v := mustRequest(t, rt, agent, lineage.Request{Tool: "pay", At: at})
		if v.Decision != lineage.Allow {
			t.Fatalf("at %s: %+v, want allow", at, v)
		}
	}
	n := len(storeLines(t, st, agent))
	for _, at := range []time.Time{runtime.Latest.Add(1), year(2318), year(2610), year(9999)} {
		if v, err := rt.Request(bg, agent, lineage.Request{Tool: "pay", At: at}); !errors.Is(err, lineage.ErrBadRequest) {
			t.Errorf("at %s: %+v, %v; want bad_request", at, v, err)
		}
		if _, err := rt.Terminate(bg, agent, runtime.Kill{By: "ops", At: at}); !errors.Is(err, lineage.ErrBadRequest) {
			t.Errorf("terminate at %s: %v; want bad_request", at, err)
		}
	}
	if got := len(storeLines(t, st, agent)); got != n {
		t.Errorf("%d records after refused requests, want %d", got, n)
	}
	// Before 1970 at_ns would be negative: refused, also for a new agent.
	if _, err := rt.CreateAgent(bg, c, runtime.CreateOptions{At: year(1969)}); !errors.Is(err, lineage.ErrBadRequest) {
		t.Errorf("agent created in 1969: %v, want bad_request", err)
	}
}

// TestRetryBeforeTimeCheck: an exact retry is answered before any time
// check, and a request still pending when the agent was terminated answers
// deny terminated (docs/decision-order.md step 1, D51).
func TestRetryBeforeTimeCheck(t *testing.T) {
	st := newMem()
	rt := runtime.Open(st, opts("retry"))
	c := mustCompileYAML(t, `
budget: 10
tools: {pay: {cost: 1}, wire: {cost: 1, requires_approval: true}}
`)
	agent := mustCreate(t, rt, c, runtime.CreateOptions{At: t0})
	first := mustRequest(t, rt, agent, lineage.Request{ID: "p1", Tool: "pay", At: sec(5)})
	mustRequest(t, rt, agent, lineage.Request{ID: "w1", Tool: "wire", At: sec(6)})
	mustRequest(t, rt, agent, lineage.Request{ID: "w2", Tool: "wire", At: sec(7)})
	mustRequest(t, rt, agent, lineage.Request{Tool: "pay", At: sec(8)})
	if _, err := rt.Approve(bg, agent, runtime.Approval{RequestID: "w2", By: "alice", At: sec(9)}); err != nil {
		t.Fatal(err)
	}
	n := len(storeLines(t, st, agent))
	v, err := rt.Request(bg, agent, lineage.Request{ID: "p1", Tool: "pay", At: sec(1)})
	if err != nil || !reflect.DeepEqual(v, first) {
		t.Errorf("retry at an earlier time: %+v, %v; want %+v", v, err, first)
	}
	if _, err := rt.Request(bg, agent, lineage.Request{ID: "p1", Tool: "wire", At: sec(1)}); !errors.Is(err, lineage.ErrIDConflict) {
		t.Errorf("conflicting retry at an earlier time: %v, want id_conflict", err)
	}
	if _, err := rt.Request(bg, agent, lineage.Request{ID: "p2", Tool: "pay", At: sec(1)}); !errors.Is(err, lineage.ErrTimeBackwards) {
		t.Errorf("new request at an earlier time: %v, want time_backwards", err)
	}
	if _, err := rt.Terminate(bg, agent, runtime.Kill{By: "ops", At: sec(10)}); err != nil {
		t.Fatal(err)
	}
	n++
	v, err = rt.Request(bg, agent, lineage.Request{ID: "w1", Tool: "wire", At: sec(2)})
	want := lineage.Verdict{Decision: lineage.Deny, Reason: "terminated", RequestID: "w1"}
	if err != nil || !reflect.DeepEqual(v, want) {
		t.Errorf("retry of a request voided by termination: %+v, %v; want %+v", v, err, want)
	}
	// A request decided before the termination keeps its verdict.
	if v, err := rt.Request(bg, agent, lineage.Request{ID: "w2", Tool: "wire", At: sec(11)}); err != nil || v.Decision != lineage.Allow {
		t.Errorf("retry of an approved request: %+v, %v; want its allow", v, err)
	}
	// The same answers from a runtime that replays the log.
	again := runtime.Open(st, reopenOpts())
	if v, err := again.Request(bg, agent, lineage.Request{ID: "w1", Tool: "wire"}); err != nil || !reflect.DeepEqual(v, want) {
		t.Errorf("after replay: %+v, %v; want %+v", v, err, want)
	}
	if got := len(storeLines(t, st, agent)); got != n {
		t.Errorf("%d records, want %d: retries record nothing", got, n)
	}
}

// TestApproverNames: an approver (and whoever pulls the kill switch) is a
// name a person can read and that is not the agent's (docs/approvals.md, D52).
func TestApproverNames(t *testing.T) {
	st := newMem()
	rt := runtime.Open(st, opts("names"))
	c := mustCompileYAML(t, `
budget: 10
tools: {wire: {cost: 1, requires_approval: true}}
`)
	agent := mustCreate(t, rt, c, runtime.CreateOptions{Name: "Payments Bot", At: t0})
	mustRequest(t, rt, agent, lineage.Request{ID: "w1", Tool: "wire", At: sec(1)})
	n := len(storeLines(t, st, agent))
	bad := []string{
		"", " alice", "alice ", "\talice", "alice\n", "alice\u00a0", "\u3000alice",
		"al\x00ice", "al\u200bice", "al\u200dice", "al\u00adice", "al\u2028ice", "al\u2029ice", "al\ufeffice",
		"al\u034fice", "al\ufe0fice", "\u115falice", "al\u2066ice", "al\x7fice", "al\xffice",
		strings.ToUpper(agent), "payments bot", "PAYMENTS BOT", "Payments Bot", agent,
		strings.Repeat("a", runtime.MaxActorBytes+1),
	}
	for _, by := range bad {
		for name, call := range map[string]func() error{
			"approve": func() error {
				_, err := rt.Approve(bg, agent, runtime.Approval{RequestID: "w1", By: by, At: sec(2)})
				return err
			},
			"reject": func() error {
				_, err := rt.Reject(bg, agent, runtime.Approval{RequestID: "w1", By: by, At: sec(2)})
				return err
			},
			"terminate": func() error {
				_, err := rt.Terminate(bg, agent, runtime.Kill{By: by, At: sec(2)})
				return err
			},
		} {
			if err := call(); !errors.Is(err, lineage.ErrBadApprover) {
				t.Errorf("%s by %q: %v; want bad_approver", name, by, err)
			}
		}
	}
	if got := len(storeLines(t, st, agent)); got != n {
		t.Fatalf("%d records after refused approvals, want %d", got, n)
	}
	for i, by := range []string{"alice", "Alice Smith", "ops-bot@example.com", "Zoë", "山田 太郎", "Payments Bot 2"} {
		id := "w" + string(rune('a'+i))
		mustRequest(t, rt, agent, lineage.Request{ID: id, Tool: "wire", At: sec(3)})
		if _, err := rt.Reject(bg, agent, runtime.Approval{RequestID: id, By: by, At: sec(3)}); err != nil {
			t.Errorf("reject by %q: %v", by, err)
		}
	}
}

// TestVerifyAgreesWithOpen: a log whose policy record was edited and
// rehashed (its digest no longer that of its document), and a log whose
// policy does not compile, fail verify and open alike, at seq 1 (docs/log.md, D53).
func TestVerifyAgreesWithOpen(t *testing.T) {
	const agent = "agt_verify"
	good := []byte(`{"budget":5,"default_rule":null,"rate_limit":null,"rego":[],"scar_limit":10,"scar_weights":{"minor":1,"moderate":3,"severe":10},"tools":{"pay":{"cost":1,"requires_approval":false,"when":[]}}}`)
	c, err := compileDoc(good)
	if err != nil {
		t.Fatal(err)
	}
	edited := []byte(strings.Replace(string(c.Document), `"budget":5`, `"budget":500`, 1))
	broken := []byte(strings.Replace(string(c.Document), `"cost":1`, `"cost":-1`, 1))
	for name, doc := range map[string]struct {
		doc    []byte
		digest string
		reason string
	}{
		"edited policy, digest kept":   {edited, c.Digest, "hashes to"},
		"policy that does not compile": {broken, hashOf(broken), "does not compile"},
	} {
		t.Run(name, func(t *testing.T) {
			g, gh := sealLine(t, 0, t0, lineage.KindGenesis, "", lineage.GenesisBody{Agent: agent})
			p, ph := sealLine(t, 1, t0, lineage.KindPolicy, gh, map[string]any{"digest": doc.digest, "policy": json.RawMessage(doc.doc)})
			a, _ := sealLine(t, 2, sec(1), lineage.KindAction, ph, map[string]any{
				"request": map[string]any{"id": "req_2", "tool": "pay", "args": map[string]any{}},
				"verdict": lineage.Verdict{Decision: lineage.Allow, Reason: "ok", Cost: 1, RequestID: "req_2", Seq: 2}})
			st := rawStore(t, agent, [][]byte{g, p, a})
			verr := runtime.Open(st, reopenOpts()).Verify(agent)
			_, oerr := runtime.Open(st, reopenOpts()).State(bg, agent)
			for what, err := range map[string]error{"verify": verr, "open": oerr} {
				var ce *runtime.ChainError
				if !errors.As(err, &ce) || ce.Seq != 1 || !strings.Contains(ce.Reason, doc.reason) {
					t.Errorf("%s: %v; want damage at seq 1 saying %q", what, err, doc.reason)
				}
			}
			if verr == nil || oerr == nil || !strings.Contains(oerr.Error(), verr.Error()) {
				t.Errorf("verify and open disagree:\nverify %v\nopen   %v", verr, oerr)
			}
		})
	}
	// Without a compiler (the CLI's verify of a file) the edited digest still fails.
	g, gh := sealLine(t, 0, t0, lineage.KindGenesis, "", lineage.GenesisBody{Agent: agent})
	p, _ := sealLine(t, 1, t0, lineage.KindPolicy, gh, map[string]any{"digest": c.Digest, "policy": json.RawMessage(edited)})
	_, err = runtime.VerifyLines(func(fn func(uint64, []byte) error) error {
		for i, l := range [][]byte{g, p} {
			if err := fn(uint64(i), l); err != nil {
				return err
			}
		}
		return nil
	})
	var ce *runtime.ChainError
	if !errors.As(err, &ce) || ce.Seq != 1 {
		t.Errorf("VerifyLines of an edited policy: %v; want damage at seq 1", err)
	}
}

func hashOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
