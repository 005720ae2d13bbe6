package runtime_test

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store"
)

const reqPolicy = `
budget: 100
tools:
  pay: {cost: 1}
  wire: {cost: 2, requires_approval: true}
`

// nest returns args nested depth containers deep (args itself is the first),
// the innermost holding leaf under "v" (or nothing if leaf is nil).
func nest(depth int, leaf any) map[string]any {
	inner := map[string]any{}
	if leaf != nil {
		inner["v"] = leaf
	}
	var v any = inner
	for i := 1; i < depth; i++ {
		if i%3 == 0 && i != depth-1 {
			v = []any{v} // arrays count too
		} else {
			v = map[string]any{"a": v}
		}
	}
	return v.(map[string]any)
}

// depthOf counts the containers of v along its deepest path.
func depthOf(v any) int {
	switch x := v.(type) {
	case map[string]any:
		d := 0
		for _, e := range x {
			d = max(d, depthOf(e))
		}
		return d + 1
	case []any:
		d := 0
		for _, e := range x {
			d = max(d, depthOf(e))
		}
		return d + 1
	}
	return 0
}

// noTrace runs fn and checks that it changed neither the agent's state nor its log.
func noTrace(t *testing.T, rt *runtime.Runtime, st store.Store, agent, what string, fn func()) {
	t.Helper()
	before, lines := mustState(t, rt, agent), storeLines(t, st, agent)
	fn()
	after := mustState(t, rt, agent)
	if !reflect.DeepEqual(before, after) {
		t.Errorf("%s changed the state:\nbefore %+v\nafter  %+v", what, before, after)
	}
	if got := storeLines(t, st, agent); !reflect.DeepEqual(got, lines) {
		t.Errorf("%s changed the log: %d records before, %d after", what, len(lines), len(got))
	}
}

// TestMalformedRequests: malformed requests are bad_request errors and leave
// no trace (docs/decision-order.md, D18 (errors, in order)).
func TestMalformedRequests(t *testing.T) {
	st := newMem()
	rt := runtime.Open(st, opts("bad"))
	agent := mustCreate(t, rt, mustCompileYAML(t, reqPolicy), runtime.CreateOptions{})
	mustRequest(t, rt, agent, lineage.Request{ID: "a1", Tool: "pay", At: sec(1)})
	mustRequest(t, rt, agent, lineage.Request{Tool: "pay", At: sec(2)}) // req_3

	for _, d := range []int{31, 32, 33} {
		if got := depthOf(nest(d, 1)); got != d {
			t.Fatalf("nest(%d) is %d deep", d, got)
		}
	}
	big := strings.Repeat("x", runtime.MaxRequestBytes)
	bad := []struct {
		name string
		req  lineage.Request
	}{
		{"no tool", lineage.Request{ID: "x1"}},
		{"tool with a space", lineage.Request{Tool: "pay now"}},
		{"tool starting with punctuation", lineage.Request{Tool: "-pay"}},
		{"tool of 129 characters", lineage.Request{Tool: strings.Repeat("a", 129)}},
		{"tool with a NUL", lineage.Request{Tool: "pay\x00"}},
		{"tool not UTF-8", lineage.Request{Tool: "pay\xff"}},
		{"id not UTF-8", lineage.Request{ID: "r\xff", Tool: "pay"}},
		{"id too long", lineage.Request{ID: strings.Repeat("i", runtime.MaxIDBytes+1), Tool: "pay"}},
		{"id .", lineage.Request{ID: ".", Tool: "pay"}},
		{"id ..", lineage.Request{ID: "..", Tool: "pay"}},
		{"id ../zz", lineage.Request{ID: "../zz", Tool: "pay"}},
		{"id with a space", lineage.Request{ID: "a b", Tool: "pay"}},
		{"id with a slash", lineage.Request{ID: "a/b", Tool: "pay"}},
		{"id with a percent", lineage.Request{ID: "a%2F", Tool: "pay"}},
		{"id not ASCII", lineage.Request{ID: "é-1", Tool: "pay"}},
		{"json.Number more digits than a double keeps", lineage.Request{Tool: "pay", Args: map[string]any{"n": json.Number("100.000000000000001")}}},
		{"json.Number underflow", lineage.Request{Tool: "pay", Args: map[string]any{"n": json.Number("1e-400")}}},
		{"args key not UTF-8", lineage.Request{Tool: "pay", Args: map[string]any{"k\xfe": 1}}},
		{"args string not UTF-8", lineage.Request{Tool: "pay", Args: map[string]any{"s": "a\xffb"}}},
		{"nested args string not UTF-8", lineage.Request{Tool: "pay", Args: map[string]any{"a": map[string]any{"b": []any{"ok", "\xc3"}}}}},
		{"nested args key not UTF-8", lineage.Request{Tool: "pay", Args: map[string]any{"a": []any{map[string]any{"\xc3": true}}}}},
		{"args 33 deep", lineage.Request{Tool: "pay", Args: nest(33, nil)}},
		{"args 33 deep with a leaf", lineage.Request{Tool: "pay", Args: nest(33, 1)}},
		{"args 100 deep", lineage.Request{Tool: "pay", Args: nest(100, "x")}},
		{"request over 64 KiB", lineage.Request{Tool: "pay", Args: map[string]any{"s": big}}},
		{"request over 64 KiB in many keys", lineage.Request{Tool: "pay", Args: manyKeys(5000)}},
		{"json.Number 2^53+1", lineage.Request{Tool: "pay", Args: map[string]any{"n": json.Number("9007199254740993")}}},
		{"json.Number -(2^53+1)", lineage.Request{Tool: "pay", Args: map[string]any{"n": json.Number("-9007199254740993")}}},
		{"json.Number 2^64", lineage.Request{Tool: "pay", Args: map[string]any{"n": json.Number("18446744073709551616")}}},
		{"json.Number 1e400", lineage.Request{Tool: "pay", Args: map[string]any{"n": json.Number("1e400")}}},
		{"json.Number garbage", lineage.Request{Tool: "pay", Args: map[string]any{"n": json.Number("12abc")}}},
		{"int64 2^53+1", lineage.Request{Tool: "pay", Args: map[string]any{"n": int64(1<<53 + 1)}}},
		{"int 2^53+1", lineage.Request{Tool: "pay", Args: map[string]any{"n": int(1<<53 + 1)}}},
		{"int -(2^60)", lineage.Request{Tool: "pay", Args: map[string]any{"n": []any{int(-(1 << 60))}}}},
		{"uint64 2^60", lineage.Request{Tool: "pay", Args: map[string]any{"n": uint64(1 << 60)}}},
		{"float64 1e300", lineage.Request{Tool: "pay", Args: map[string]any{"n": 1e300}}},
		{"float64 NaN", lineage.Request{Tool: "pay", Args: map[string]any{"n": math.NaN()}}},
		{"float64 +Inf", lineage.Request{Tool: "pay", Args: map[string]any{"n": math.Inf(1)}}},
		{"nested 2^53+1", lineage.Request{Tool: "pay", Args: map[string]any{"a": []any{json.Number("9007199254740993")}}}},
		{"a func in args", lineage.Request{Tool: "pay", Args: map[string]any{"f": func() {}}}},
		{"unknown req_<n> id", lineage.Request{ID: "req_999", Tool: "pay"}},
		{"req_<n> naming no request", lineage.Request{ID: "req_0", Tool: "pay"}},
		{"req_<n> with a leading zero", lineage.Request{ID: "req_03", Tool: "pay"}},
	}
	for _, tc := range bad {
		noTrace(t, rt, st, agent, tc.name, func() {
			tc.req.At = sec(2) // the last record's time: fine (D7: time never goes backwards)
			v, err := rt.Request(bg, agent, tc.req)
			if !errors.Is(err, lineage.ErrBadRequest) {
				t.Errorf("%s: got verdict %+v, error %v; want bad_request", tc.name, v, err)
			}
		})
	}

	// Time backwards is its own error; the same time is fine (D7: time never goes backwards).
	noTrace(t, rt, st, agent, "time backwards", func() {
		if _, err := rt.Request(bg, agent, lineage.Request{Tool: "pay", At: sec(1.5)}); !errors.Is(err, lineage.ErrTimeBackwards) {
			t.Errorf("time backwards: %v", err)
		}
		// D18 (errors, in order): a malformed request is bad_request even when its time is also wrong.
		if _, err := rt.Request(bg, agent, lineage.Request{Tool: "pay now", At: sec(1.5)}); !errors.Is(err, lineage.ErrBadRequest) {
			t.Errorf("malformed and backwards: %v, want bad_request", err)
		}
		// ...but an exact retry is answered whatever its at (docs/decision-order.md step 1).
		if v, err := rt.Request(bg, agent, lineage.Request{ID: "a1", Tool: "pay", At: sec(0.5)}); err != nil || v.RequestID != "a1" {
			t.Errorf("retry backwards: %+v, %v; want the recorded verdict", v, err)
		}
	})

	// The boundaries are accepted and recorded.
	good := []struct {
		name string
		req  lineage.Request
	}{
		{"same time as the last record", lineage.Request{Tool: "pay"}},
		{"args 32 deep", lineage.Request{Tool: "pay", Args: nest(32, nil)}},
		{"args 32 deep with a leaf", lineage.Request{Tool: "pay", Args: nest(32, "leaf")}},
		{"tool of 128 characters", lineage.Request{Tool: strings.Repeat("b", 128)}},
		{"id of 128 characters", lineage.Request{ID: strings.Repeat("i", runtime.MaxIDBytes), Tool: "pay"}},
		{"id of every allowed character", lineage.Request{ID: "aZ09._:~-", Tool: "pay"}},
		{"id ...", lineage.Request{ID: "...", Tool: "pay"}},
		{"numbers a double holds", lineage.Request{Tool: "pay", Args: map[string]any{"a": json.Number("0.1"), "b": json.Number("1.0"), "c": json.Number("1e2"), "d": json.Number("-2.5e-3"), "e": json.Number("-0")}}},
		{"2^53", lineage.Request{Tool: "pay", Args: map[string]any{"n": json.Number("9007199254740992"), "m": int64(-1 << 53), "f": 1.5}}},
		{"unicode", lineage.Request{ID: "e-1", Tool: "pay", Args: map[string]any{"clé": "café ✓ \u2028"}}},
		{"request of 60 KiB", lineage.Request{Tool: "pay", Args: map[string]any{"s": strings.Repeat("y", 60<<10)}}},
		{"null, bool, array", lineage.Request{Tool: "pay", Args: map[string]any{"n": nil, "b": false, "a": []any{}}}},
	}
	for _, tc := range good {
		tc.req.At = sec(2)
		v, err := rt.Request(bg, agent, tc.req)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if v.Seq == 0 {
			t.Errorf("%s: verdict %+v not recorded", tc.name, v)
		}
	}
	if err := rt.Verify(agent); err != nil {
		t.Fatal(err)
	}
	// Everything accepted replays to the same state.
	replayed := mustState(t, runtime.Open(st, reopenOpts()), agent)
	if live := mustState(t, rt, agent); !reflect.DeepEqual(normalizeState(live), normalizeState(replayed)) {
		t.Errorf("replay differs:\nlive   %+v\nreplay %+v", live, replayed)
	}
}

func manyKeys(n int) map[string]any {
	m := make(map[string]any, n)
	for i := range n {
		m["key_"+strconv.Itoa(i)] = "value of some length"
	}
	return m
}

// TestRecordedArgsExact: what is recorded is exactly what was asked: a number
// in args is never rounded on its way into the log.
func TestRecordedArgsExact(t *testing.T) {
	st := newMem()
	rt := runtime.Open(st, opts("exact"))
	agent := mustCreate(t, rt, mustCompileYAML(t, reqPolicy), runtime.CreateOptions{})
	for i, n := range []string{"9007199254740992", "-9007199254740992", "12345", "1.5", "0.25", "-7", "9007199254740993"} {
		v, err := rt.Request(bg, agent, lineage.Request{Tool: "pay", Args: map[string]any{"n": json.Number(n)}, At: sec(float64(i))})
		if errors.Is(err, lineage.ErrBadRequest) && n == "9007199254740993" {
			continue // refused: fine (TestMalformedRequests wants exactly that)
		}
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		recs, err := rt.Records(agent)
		if err != nil {
			t.Fatal(err)
		}
		var body lineage.ActionBody
		dec := json.NewDecoder(strings.NewReader(string(recs[v.Seq].Body)))
		dec.UseNumber()
		if err := dec.Decode(&body); err != nil {
			t.Fatal(err)
		}
		if got := body.Request.Args["n"]; got != json.Number(n) {
			t.Errorf("args n = %s was recorded as %v", n, got)
		}
	}
}

func TestParseArgs(t *testing.T) {
	for _, text := range []string{
		"", " ", "[]", "[1]", "1", `"s"`, "null", "true", "{", "nope", `{"a":}`, `{"a" 1}`, "\xff",
		`{"a":"\xff"}`, "{} {}", "{}x", "{}}", "{}]", "{} ]", `{"a":1}{"b":2}`, "{}\n[",
		`{"s":"` + strings.Repeat("x", runtime.MaxRequestBytes) + `"}`,
	} {
		m, err := runtime.ParseArgs(text)
		if !errors.Is(err, lineage.ErrBadRequest) {
			t.Errorf("ParseArgs(%.40q) = %v, %v; want bad_request", text, m, err)
		}
	}
	m, err := runtime.ParseArgs(" {\"a\": 1, \"b\": [1.5, \"x\", {\"c\": null}], \"big\": 9007199254740992} \n\t")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"a": json.Number("1"), "b": []any{json.Number("1.5"), "x", map[string]any{"c": nil}}, "big": json.Number("9007199254740992")}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("ParseArgs = %#v, want %#v", m, want)
	}
	if m, err := runtime.ParseArgs("{}"); err != nil || m == nil || len(m) != 0 {
		t.Errorf("ParseArgs({}) = %#v, %v", m, err)
	}
}

// TestRetries: a retry returns the current verdict and seq and appends nothing
// (docs/decision-order.md step 1, D2 (retries), D3 (id conflicts), D4 (refusals that are not recorded), D17 (assigned ids)).
func TestRetries(t *testing.T) {
	st := newMem()
	rt := runtime.Open(st, opts("retry"))
	agent := mustCreate(t, rt, mustCompileYAML(t, reqPolicy), runtime.CreateOptions{})
	v1 := mustRequest(t, rt, agent, lineage.Request{ID: "r1", Tool: "pay", Args: map[string]any{"n": 1, "s": "x"}, At: sec(1)})
	vNoID := mustRequest(t, rt, agent, lineage.Request{Tool: "pay", At: sec(2)})
	if vNoID.RequestID != "req_3" || vNoID.Seq != 3 {
		t.Fatalf("assigned id: %+v, want req_3 at seq 3", vNoID)
	}
	vDeny := mustRequest(t, rt, agent, lineage.Request{ID: "d1", Tool: "shell", At: sec(3)})
	vPend := mustRequest(t, rt, agent, lineage.Request{ID: "w1", Tool: "wire", At: sec(4)})
	if vDeny.Decision != lineage.Deny || vDeny.Scar == nil || vPend.Decision != lineage.Pending {
		t.Fatalf("setup: %+v %+v", vDeny, vPend)
	}

	retry := func(what string, req lineage.Request, want lineage.Verdict) {
		t.Helper()
		noTrace(t, rt, st, agent, what, func() {
			req.At = sec(10)
			v, err := rt.Request(bg, agent, req)
			if err != nil {
				t.Errorf("%s: %v", what, err)
			} else if !reflect.DeepEqual(v, want) {
				t.Errorf("%s: %+v, want %+v", what, v, want)
			}
		})
	}
	retry("same request", lineage.Request{ID: "r1", Tool: "pay", Args: map[string]any{"n": 1, "s": "x"}}, v1)
	retry("same args as other Go types", lineage.Request{ID: "r1", Tool: "pay", Args: map[string]any{"s": "x", "n": json.Number("1")}}, v1)
	retry("same args as a float", lineage.Request{ID: "r1", Tool: "pay", Args: map[string]any{"s": "x", "n": 1.0}}, v1)
	retry("assigned id", lineage.Request{ID: "req_3", Tool: "pay"}, vNoID)
	retry("assigned id, args {}", lineage.Request{ID: "req_3", Tool: "pay", Args: map[string]any{}}, vNoID)
	retry("a denied request", lineage.Request{ID: "d1", Tool: "shell"}, vDeny)
	retry("a pending request", lineage.Request{ID: "w1", Tool: "wire"}, vPend)

	conflict := func(what string, req lineage.Request) {
		t.Helper()
		noTrace(t, rt, st, agent, what, func() {
			req.At = sec(10)
			if v, err := rt.Request(bg, agent, req); !errors.Is(err, lineage.ErrIDConflict) {
				t.Errorf("%s: %+v, %v; want id_conflict", what, v, err)
			}
		})
	}
	conflict("other tool", lineage.Request{ID: "r1", Tool: "wire", Args: map[string]any{"n": 1, "s": "x"}})
	conflict("other args", lineage.Request{ID: "r1", Tool: "pay", Args: map[string]any{"n": 2, "s": "x"}})
	conflict("fewer args", lineage.Request{ID: "r1", Tool: "pay"})
	conflict("args on an assigned id", lineage.Request{ID: "req_3", Tool: "pay", Args: map[string]any{"x": 1}})
	conflict("number as a string", lineage.Request{ID: "r1", Tool: "pay", Args: map[string]any{"n": "1", "s": "x"}})

	// After approval, a retry returns the approval's verdict and seq (D2: retries).
	va, err := rt.Approve(bg, agent, runtime.Approval{RequestID: "w1", By: "alice", At: sec(6)})
	if err != nil {
		t.Fatal(err)
	}
	retry("an approved request", lineage.Request{ID: "w1", Tool: "wire"}, va)
	if va.Seq != 6 || va.RequestID != "w1" {
		t.Errorf("approval verdict %+v, want seq 6", va)
	}
	// After termination, retries are still answered; new requests are denied
	// terminated with seq 0 and the id as given (D4: refusals that are not recorded).
	if _, err := rt.Terminate(bg, agent, runtime.Kill{By: "ops", At: sec(7)}); err != nil {
		t.Fatal(err)
	}
	retry("after termination", lineage.Request{ID: "r1", Tool: "pay", Args: map[string]any{"n": 1, "s": "x"}}, v1)
	retry("approved, after termination", lineage.Request{ID: "w1", Tool: "wire"}, va)
	retry("new id after termination", lineage.Request{ID: "new", Tool: "pay"},
		lineage.Verdict{Decision: lineage.Deny, Reason: "terminated", RequestID: "new"})
	retry("no id after termination", lineage.Request{Tool: "pay"},
		lineage.Verdict{Decision: lineage.Deny, Reason: "terminated"})
	conflict("conflict after termination", lineage.Request{ID: "r1", Tool: "wire"})

	// A fresh runtime answers retries the same way: the seen ids replay.
	rt2 := runtime.Open(st, reopenOpts())
	for id, want := range map[string]lineage.Verdict{"r1": v1, "req_3": vNoID, "d1": vDeny, "w1": va} {
		tool := map[string]string{"r1": "pay", "req_3": "pay", "d1": "shell", "w1": "wire"}[id]
		var args map[string]any
		if id == "r1" {
			args = map[string]any{"n": 1, "s": "x"}
		}
		v, err := rt2.Request(bg, agent, lineage.Request{ID: id, Tool: tool, Args: args, At: sec(10)})
		if err != nil || !reflect.DeepEqual(v, want) {
			t.Errorf("replayed retry of %s: %+v, %v; want %+v", id, v, err, want)
		}
	}
	if _, err := rt2.Request(bg, agent, lineage.Request{ID: "r1", Tool: "pay", At: sec(10)}); !errors.Is(err, lineage.ErrIDConflict) {
		t.Errorf("replayed conflict: %v", err)
	}
}

// TestApprovals: approve and reject, their records, and their errors in the
// order D18 (errors, in order) gives.
func TestApprovals(t *testing.T) {
	st := newMem()
	rt := runtime.Open(st, opts("appr"))
	agent := mustCreate(t, rt, mustCompileYAML(t, "budget: 3\ntools: {pay: {cost: 1}, wire: {cost: 2, requires_approval: true}}\n"), runtime.CreateOptions{})
	for i, id := range []string{"w1", "w2", "w3", "w4"} {
		if v := mustRequest(t, rt, agent, lineage.Request{ID: id, Tool: "wire", Args: map[string]any{"i": i}, At: sec(1)}); v.Decision != lineage.Pending || v.Cost != 0 {
			t.Fatalf("%s: %+v", id, v)
		}
	}
	state := mustState(t, rt, agent)
	if len(state.Pending) != 4 || state.Spent != 0 || len(state.Calls) != 0 {
		t.Fatalf("pending state %+v", state)
	}
	if p := state.Pending["w2"]; p.ID != "w2" || p.Tool != "wire" || !reflect.DeepEqual(p.Args, map[string]any{"i": json.Number("1")}) {
		t.Errorf("pending w2 = %#v", p)
	}

	apErr := func(what string, fn func() (lineage.Verdict, error), want error) {
		t.Helper()
		noTrace(t, rt, st, agent, what, func() {
			if v, err := fn(); !errors.Is(err, want) {
				t.Errorf("%s: %+v, %v; want %v", what, v, err, want)
			}
		})
	}
	approve := func(id, by string, at float64) func() (lineage.Verdict, error) {
		return func() (lineage.Verdict, error) {
			return rt.Approve(bg, agent, runtime.Approval{RequestID: id, By: by, At: sec(at)})
		}
	}
	reject := func(id, by string, at float64) func() (lineage.Verdict, error) {
		return func() (lineage.Verdict, error) {
			return rt.Reject(bg, agent, runtime.Approval{RequestID: id, By: by, At: sec(at)})
		}
	}
	apErr("empty approver", approve("w1", "", 2), lineage.ErrBadApprover)
	apErr("the agent approving itself", approve("w1", agent, 2), lineage.ErrBadApprover)
	apErr("the agent rejecting itself", reject("w1", agent, 2), lineage.ErrBadApprover)
	apErr("approver not UTF-8", approve("w1", "al\xffce", 2), lineage.ErrBadApprover)
	apErr("unknown id", approve("nope", "alice", 2), lineage.ErrNotPending)
	apErr("reject unknown id", reject("nope", "alice", 2), lineage.ErrNotPending)
	apErr("time backwards", approve("w1", "alice", 0.5), lineage.ErrTimeBackwards)
	apErr("bad approver before time backwards", approve("w1", "", 0.5), lineage.ErrBadApprover)
	apErr("time backwards before not pending", approve("nope", "alice", 0.5), lineage.ErrTimeBackwards)

	v, err := rt.Approve(bg, agent, runtime.Approval{RequestID: "w1", By: "alice", At: sec(2)})
	if err != nil {
		t.Fatal(err)
	}
	want := lineage.Verdict{Decision: lineage.Allow, Reason: "ok", Cost: 2, RequestID: "w1", Seq: 6}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("approve: %+v, want %+v", v, want)
	}
	recs, err := rt.Records(agent)
	if err != nil {
		t.Fatal(err)
	}
	if r := recs[len(recs)-1]; r.Kind != lineage.KindApproval || r.Seq != v.Seq || !r.At.Equal(sec(2)) {
		t.Errorf("approval record %d %s at %v", r.Seq, r.Kind, r.At)
	} else {
		var body lineage.ApprovalBody
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(body, lineage.ApprovalBody{RequestID: "w1", Approver: "alice", Approved: true, Verdict: want}) {
			t.Errorf("approval body %+v", body)
		}
	}
	state = mustState(t, rt, agent)
	if state.Spent != 2 || state.Calls["wire"] != 1 || len(state.Pending) != 3 {
		t.Errorf("after approval: %+v", state)
	}
	apErr("approve twice", approve("w1", "alice", 3), lineage.ErrNotPending)
	apErr("reject after approve", reject("w1", "bob", 3), lineage.ErrNotPending)

	// Approval re-runs the checks: 1 credit left, wire costs 2 → deny, no scar (D10: approval re-check).
	v, err = rt.Approve(bg, agent, runtime.Approval{RequestID: "w2", By: "bob", At: sec(3)})
	if err != nil {
		t.Fatal(err)
	}
	if v.Decision != lineage.Deny || v.Reason != "insufficient_budget" || v.Scar != nil || v.Cost != 0 || v.Seq != 7 {
		t.Errorf("approve over budget: %+v", v)
	}
	v, err = rt.Reject(bg, agent, runtime.Approval{RequestID: "w3", By: "bob", At: sec(3)})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(v, lineage.Verdict{Decision: lineage.Deny, Reason: "approval_rejected", RequestID: "w3", Seq: 8}) {
		t.Errorf("reject: %+v", v)
	}
	state = mustState(t, rt, agent)
	if state.ScarScore != 0 || state.Spent != 2 || len(state.Pending) != 1 || state.Calls["wire"] != 1 {
		t.Errorf("after deny and reject: %+v", state)
	}

	// Termination voids w4 (D11: pending is void at termination); everything afterwards is sealed, in D18 (errors, in order) order.
	if _, err := rt.Terminate(bg, agent, runtime.Kill{By: "ops", At: sec(4)}); err != nil {
		t.Fatal(err)
	}
	if state = mustState(t, rt, agent); len(state.Pending) != 0 || state.Status != lineage.Terminated || state.Termination != lineage.Killed {
		t.Errorf("after terminate: %+v", state)
	}
	apErr("approve after terminate", approve("w4", "alice", 5), lineage.ErrSealed)
	apErr("reject after terminate", reject("w4", "alice", 5), lineage.ErrSealed)
	apErr("unknown id after terminate", approve("nope", "alice", 5), lineage.ErrSealed)
	apErr("bad approver after terminate", approve("w4", "", 5), lineage.ErrBadApprover)
	apErr("time backwards after terminate", approve("w4", "alice", 3.5), lineage.ErrTimeBackwards)
	kill := func(by string, at float64) func() (lineage.Verdict, error) {
		return func() (lineage.Verdict, error) {
			_, err := rt.Terminate(bg, agent, runtime.Kill{By: by, At: sec(at)})
			return lineage.Verdict{}, err
		}
	}
	apErr("terminate twice", kill("ops", 5), lineage.ErrSealed)
	apErr("terminate without by, sealed", kill("", 5), lineage.ErrBadRequest)
	apErr("terminate backwards, sealed", kill("ops", 3), lineage.ErrTimeBackwards)
	if err := rt.Verify(agent); err != nil {
		t.Fatal(err)
	}
}

// TestTerminateErrors: the kill switch on a live agent (D13: 'terminate' on a terminated agent is an error ('sealed'), D18 (errors, in order)).
func TestTerminateErrors(t *testing.T) {
	st := newMem()
	rt := runtime.Open(st, opts("kill"))
	agent := mustCreate(t, rt, mustCompileYAML(t, reqPolicy), runtime.CreateOptions{})
	mustRequest(t, rt, agent, lineage.Request{Tool: "pay", At: sec(2)})
	noTrace(t, rt, st, agent, "terminate errors", func() {
		if _, err := rt.Terminate(bg, agent, runtime.Kill{At: sec(3)}); !errors.Is(err, lineage.ErrBadRequest) {
			t.Errorf("no by: %v", err)
		}
		if _, err := rt.Terminate(bg, agent, runtime.Kill{By: "ops", At: sec(1)}); !errors.Is(err, lineage.ErrTimeBackwards) {
			t.Errorf("backwards: %v", err)
		}
		if _, err := rt.Terminate(bg, "agt_nobody", runtime.Kill{By: "ops", At: sec(3)}); !errors.Is(err, lineage.ErrUnknownAgent) {
			t.Errorf("unknown agent: %v", err)
		}
	})
	state, err := rt.Terminate(bg, agent, runtime.Kill{By: "ops", Note: "why not", At: sec(2)})
	if err != nil {
		t.Fatal(err)
	}
	if state.Status != lineage.Terminated || state.Termination != lineage.Killed || state.Seq != 3 {
		t.Errorf("terminate: %+v", state)
	}
	if _, err := rt.Terminate(bg, agent, runtime.Kill{By: "ops", At: sec(3)}); !errors.Is(err, lineage.ErrSealed) {
		t.Errorf("second terminate: %v", err)
	}
	// A fresh runtime sees a sealed log too.
	if _, err := runtime.Open(st, reopenOpts()).Terminate(bg, agent, runtime.Kill{By: "ops", At: sec(3)}); !errors.Is(err, lineage.ErrSealed) {
		t.Errorf("terminate after reopening: %v", err)
	}
}

// TestParent: a new agent may name its parent; an empty head is filled with
// the parent's current head (docs/log.md).
func TestParent(t *testing.T) {
	st := newMem()
	rt := runtime.Open(st, opts("parent"))
	c := mustCompileYAML(t, reqPolicy)
	parent := mustCreate(t, rt, c, runtime.CreateOptions{Name: "v1"})
	mustRequest(t, rt, parent, lineage.Request{Tool: "pay", At: sec(1)})
	head := mustState(t, rt, parent).Head

	genesisOf := func(rt *runtime.Runtime, agent string) lineage.GenesisBody {
		t.Helper()
		recs, err := rt.Records(agent)
		if err != nil {
			t.Fatal(err)
		}
		var g lineage.GenesisBody
		if err := json.Unmarshal(recs[0].Body, &g); err != nil {
			t.Fatal(err)
		}
		return g
	}
	child := mustCreate(t, rt, c, runtime.CreateOptions{Name: "v2", Parent: &lineage.Parent{Agent: parent}, At: sec(2)})
	if g := genesisOf(rt, child); g.Parent == nil || *g.Parent != (lineage.Parent{Agent: parent, Head: head}) || g.Name != "v2" || g.Agent != child {
		t.Errorf("child genesis %+v, want parent %s at head %s", g, parent, head)
	}
	// Loaded from the store by a fresh runtime, too.
	rt2 := runtime.Open(st, opts("parent2"))
	child2 := mustCreate(t, rt2, c, runtime.CreateOptions{Parent: &lineage.Parent{Agent: parent}, At: sec(2)})
	if g := genesisOf(rt2, child2); g.Parent == nil || g.Parent.Head != head {
		t.Errorf("child of a reloaded parent: %+v", g)
	}
	// An explicit head is kept as given.
	given := lineage.Parent{Agent: parent, Head: "sha256:" + strings.Repeat("ab", 32)}
	child3 := mustCreate(t, rt, c, runtime.CreateOptions{Parent: &given, At: sec(2)})
	if g := genesisOf(rt, child3); g.Parent == nil || *g.Parent != given {
		t.Errorf("explicit head: %+v", g)
	}
	// The parent's log is untouched, and the children are alive with fresh state.
	if s := mustState(t, rt, parent); s.Head != head {
		t.Errorf("parent head moved to %s", s.Head)
	}
	if s := mustState(t, rt, child); s.Spent != 0 || s.Seq != 1 || s.Status != lineage.Alive {
		t.Errorf("child state %+v", s)
	}
	// An unknown parent with no head is an error and creates nothing.
	before, _ := rt.Agents()
	if _, err := rt.CreateAgent(bg, c, runtime.CreateOptions{Parent: &lineage.Parent{Agent: "agt_nobody"}, At: sec(3)}); !errors.Is(err, lineage.ErrUnknownAgent) {
		t.Errorf("unknown parent: %v", err)
	}
	if after, _ := rt.Agents(); !reflect.DeepEqual(before, after) {
		t.Errorf("agents %v became %v", before, after)
	}
}

// TestBadArgsSayWhere: a bad value in args is named by its JSON pointer.
func TestBadArgsSayWhere(t *testing.T) {
	rt := runtime.Open(newMem(), opts("where"))
	agent := mustCreate(t, rt, mustCompileYAML(t, reqPolicy), runtime.CreateOptions{})
	for _, tc := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"s": "a\xffb"}, "invalid UTF-8 in the string at /args/s"},
		{map[string]any{"a/b": map[string]any{"c~d": []any{"ok", json.Number("1e400")}}}, `number 1e400 at /args/a~1b/c~0d/1 is beyond the range of a double`},
		{map[string]any{"n": []any{1, int64(1<<53 + 1)}}, "number 9007199254740993 at /args/n/1 exceeds 2^53; send it as a string"},
		{map[string]any{"f": 1.5, "g": math.NaN()}, "number NaN at /args/g is not exactly representable in JSON"},
		{map[string]any{"x": []any{map[string]any{"k\xfe": 1}}}, "invalid UTF-8 in a key at /args/x/0"},
		{map[string]any{"fn": func() {}}, "value of type func() at /args/fn is not JSON"},
		{nest(40, 1), "args nest deeper than 32 levels at /args/a/a/a/0/a/a/0/a/a/0/a/a/0/a/a/0/a/a/0/a/a/0/a/a/0/a/a/0/a/a/0/a"},
	} {
		_, err := rt.Request(bg, agent, lineage.Request{Tool: "pay", Args: tc.args})
		if !errors.Is(err, lineage.ErrBadRequest) || err.Error() != "bad_request: "+tc.want {
			t.Errorf("args %v: error %v; want bad_request saying %q", tc.args, err, tc.want)
		}
	}
}

// TestAssignedIDRetryAfterApproval: a pending request without an id gets
// req_<seq>; once approved, a retry by that id returns the approval's
// verdict, before and after the log is replayed; args on it conflict.
func TestAssignedIDRetryAfterApproval(t *testing.T) {
	st := newMem()
	rt := runtime.Open(st, opts("assigned"))
	agent := mustCreate(t, rt, mustCompileYAML(t, reqPolicy), runtime.CreateOptions{})
	mustRequest(t, rt, agent, lineage.Request{Tool: "pay", At: sec(1)}) // req_2
	pending := mustRequest(t, rt, agent, lineage.Request{Tool: "wire", At: sec(2)})
	if pending.Decision != lineage.Pending || pending.RequestID != "req_3" {
		t.Fatalf("wire: %+v, want pending req_3", pending)
	}
	mustRequest(t, rt, agent, lineage.Request{ID: "caller-1", Tool: "pay", At: sec(3)})
	approved, err := rt.Approve(bg, agent, runtime.Approval{RequestID: "req_3", By: "alice", At: sec(4)})
	if err != nil || approved.Decision != lineage.Allow {
		t.Fatalf("approve: %+v, %v", approved, err)
	}
	for _, r := range []*runtime.Runtime{rt, runtime.Open(st, opts("assigned-replay"))} {
		for id, want := range map[string]lineage.Verdict{"req_3": approved, "req_2": {}} {
			tool := map[string]string{"req_3": "wire", "req_2": "pay"}[id]
			got, err := r.Request(bg, agent, lineage.Request{ID: id, Tool: tool, At: sec(5)})
			if err != nil {
				t.Fatalf("retry %s: %v", id, err)
			}
			if want.Decision != "" && !reflect.DeepEqual(got, want) {
				t.Errorf("retry %s: %+v, want the approval's %+v", id, got, want)
			}
			if id == "req_2" && (got.Decision != lineage.Allow || got.Seq != 2) {
				t.Errorf("retry req_2: %+v, want the allow at seq 2", got)
			}
		}
		if _, err := r.Request(bg, agent, lineage.Request{ID: "req_3", Tool: "wire", Args: map[string]any{"x": 1}, At: sec(5)}); !errors.Is(err, lineage.ErrIDConflict) {
			t.Errorf("req_3 with args: %v, want id_conflict", err)
		}
		if _, err := r.Request(bg, agent, lineage.Request{ID: "req_4", Tool: "pay", At: sec(5)}); !errors.Is(err, lineage.ErrBadRequest) {
			t.Errorf("req_4 names the caller's request: %v, want bad_request", err)
		}
	}
}

// TestTimesARecordCannotHold: a time outside the years 0000-9999 is a bad
// request (the record's time layout has four digits), for a request, an
// approval, a kill and a new agent; nothing is recorded.
func TestTimesARecordCannotHold(t *testing.T) {
	st := newMem()
	rt := runtime.Open(st, opts("years"))
	c := mustCompileYAML(t, reqPolicy)
	for _, at := range []time.Time{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 12, 31, 0, 0, 0, 0, time.UTC)} {
		if _, err := rt.CreateAgent(bg, c, runtime.CreateOptions{At: at}); !errors.Is(err, lineage.ErrBadRequest) {
			t.Errorf("create at %v: %v, want bad_request", at, err)
		}
	}
	agent := mustCreate(t, rt, c, runtime.CreateOptions{})
	mustRequest(t, rt, agent, lineage.Request{ID: "w", Tool: "wire", At: sec(1)})
	far := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	noTrace(t, rt, st, agent, "request in year 10000", func() {
		if _, err := rt.Request(bg, agent, lineage.Request{Tool: "pay", At: far}); !errors.Is(err, lineage.ErrBadRequest) {
			t.Errorf("request: %v, want bad_request", err)
		}
		if _, err := rt.Approve(bg, agent, runtime.Approval{RequestID: "w", By: "alice", At: far}); !errors.Is(err, lineage.ErrBadRequest) {
			t.Errorf("approve: %v, want bad_request", err)
		}
		if _, err := rt.Terminate(bg, agent, runtime.Kill{By: "alice", At: far}); !errors.Is(err, lineage.ErrBadRequest) {
			t.Errorf("kill: %v, want bad_request", err)
		}
	})
	if err := rt.Verify(agent); err != nil {
		t.Fatal(err)
	}
}

// TestTimesTheRuntimeHolds: a time the runtime cannot keep exactly as int64
// nanoseconds since 1970 (record, window, at_ns) is a malformed request and
// nothing is recorded; 1970 through 2262-04-11 work (docs/decision-order.md, D50 (the times the guard holds)).
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
// deny terminated (docs/decision-order.md step 1, D51 (retries come before time checks)).
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
