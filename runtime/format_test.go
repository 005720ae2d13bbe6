package runtime_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/runtime"
)

var atFormat = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{9}Z$`)

// TestRecordFormat checks every stored line against docs/log.md with code of its
// own: the line is the RFC 8785 canonical JSON of the record, the hash is the
// SHA-256 of the canonical JSON without the hash field, the chain links, `at`
// has nine fractional digits, and record 1 holds the compiled policy.
func TestRecordFormat(t *testing.T) {
	dir := t.TempDir()
	st := openFileStore(t, dir)
	defer st.Close()
	rt := runtime.Open(st, opts("fmt"))
	c := mustCompileYAML(t, samplePolicy)
	agent, n := buildSampleLog(t, rt, c, true)
	lines := storeLines(t, st, agent)
	if len(lines) != n {
		t.Fatalf("%d lines, %d records", len(lines), n)
	}
	// The file is exactly the lines, one per record, each ending in '\n'.
	if want := append(bytes.Join(lines, []byte("\n")), '\n'); !bytes.Equal(readFile(t, agentPath(dir, agent)), want) {
		t.Fatal("the file is not the stored lines joined by newlines")
	}
	recs, err := rt.Records(agent)
	if err != nil || len(recs) != n {
		t.Fatalf("Records: %d, %v", len(recs), err)
	}
	kinds := map[lineage.Kind]bool{}
	prev := ""
	for i, line := range lines {
		canon, err := jcs.Transform(line)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if !bytes.Equal(canon, line) {
			t.Errorf("record %d is not in canonical form:\nstored %s\ncanon  %s", i, line, canon)
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(line, &fields); err != nil {
			t.Fatal(err)
		}
		var keys []string
		for k := range fields {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if got := strings.Join(keys, ","); got != "at,body,hash,kind,prev,seq" {
			t.Errorf("record %d has fields %s", i, got)
		}
		var hash, at, kind, prevField string
		var seq uint64
		for k, dst := range map[string]any{"hash": &hash, "at": &at, "kind": &kind, "prev": &prevField, "seq": &seq} {
			if err := json.Unmarshal(fields[k], dst); err != nil {
				t.Fatalf("record %d field %s: %v", i, k, err)
			}
		}
		delete(fields, "hash")
		unsigned := mustJCS(t, fields)
		sum := sha256.Sum256(unsigned)
		if want := "sha256:" + hex.EncodeToString(sum[:]); hash != want {
			t.Errorf("record %d: hash %s, want sha256 of its canonical JSON without hash: %s", i, hash, want)
		}
		if seq != uint64(i) {
			t.Errorf("record %d has seq %d", i, seq)
		}
		if prevField != prev {
			t.Errorf("record %d: prev %q, want %q", i, prevField, prev)
		}
		if !atFormat.MatchString(at) {
			t.Errorf("record %d: at %q does not have 9 fractional digits in UTC", i, at)
		}
		// The record the API returns is the stored one.
		r := recs[i]
		if r.Hash != hash || r.Prev != prev || string(r.Kind) != kind || r.At.Format(lineage.TimeLayout) != at ||
			!bytes.Equal(mustJCS(t, json.RawMessage(r.Body)), mustJCS(t, fields["body"])) {
			t.Errorf("record %d from Records differs from the stored line", i)
		}
		// An independent sealing of the same content gives the same bytes.
		if again, h := sealLine(t, seq, r.At.Time, r.Kind, prevField, fields["body"]); !bytes.Equal(again, line) || h != hash {
			t.Errorf("record %d: sealing its content again gives\n%s\nnot\n%s", i, again, line)
		}
		kinds[lineage.Kind(kind)] = true
		prev = hash
	}
	for _, k := range []lineage.Kind{lineage.KindGenesis, lineage.KindPolicy, lineage.KindAction, lineage.KindApproval, lineage.KindTermination} {
		if !kinds[k] {
			t.Errorf("the sample log has no %s record", k)
		}
	}
	if recs[0].Kind != lineage.KindGenesis || recs[0].Prev != "" {
		t.Errorf("record 0: kind %s prev %q", recs[0].Kind, recs[0].Prev)
	}
	var g lineage.GenesisBody
	if err := json.Unmarshal(recs[0].Body, &g); err != nil || g.Agent != agent || g.Name != "sample" || g.Parent != nil {
		t.Errorf("genesis body %s (%v)", recs[0].Body, err)
	}
	if recs[1].Kind != lineage.KindPolicy {
		t.Fatalf("record 1 is %s", recs[1].Kind)
	}
	var p struct {
		Digest string          `json:"digest"`
		Policy json.RawMessage `json:"policy"`
	}
	if err := json.Unmarshal(recs[1].Body, &p); err != nil {
		t.Fatal(err)
	}
	if p.Digest != c.Digest {
		t.Errorf("policy digest %s, compiled %s", p.Digest, c.Digest)
	}
	if !bytes.Equal(p.Policy, c.Document) {
		t.Errorf("policy record holds\n%s\nnot the compiled document\n%s", p.Policy, c.Document)
	}
	if sum := sha256.Sum256(p.Policy); "sha256:"+hex.EncodeToString(sum[:]) != p.Digest {
		t.Errorf("digest %s is not the SHA-256 of the policy document", p.Digest)
	}
	last := recs[n-1]
	var term lineage.TerminationBody
	if err := json.Unmarshal(last.Body, &term); err != nil || last.Kind != lineage.KindTermination ||
		term.Reason != lineage.Killed || term.By != "ops" || term.Note != "done" {
		t.Errorf("last record %s %s (%v)", last.Kind, last.Body, err)
	}
	if state := mustState(t, rt, agent); state.Head != last.Hash || state.Seq != last.Seq {
		t.Errorf("state head %s seq %d, last record %s %d", state.Head, state.Seq, last.Hash, last.Seq)
	}
}

// TestRecordBodies pins the bodies of action, approval and caused termination
// records (docs/log.md table, D1 (cost), D6 (termination time), D15 (a request without 'args' is recorded with 'args: {}'), D17 (assigned ids)).
func TestRecordBodies(t *testing.T) {
	rt := runtime.Open(newMem(), opts("bodies"))
	c := mustCompileYAML(t, "budget: 3\ntools: {pay: {cost: 1}, wire: {cost: 2, requires_approval: true}}\n")
	agent := mustCreate(t, rt, c, runtime.CreateOptions{})
	v1 := mustRequest(t, rt, agent, lineage.Request{Tool: "pay", At: sec(1.000000001)})
	v2 := mustRequest(t, rt, agent, lineage.Request{ID: "w", Tool: "wire", Args: map[string]any{"b": 1, "a": "x"}, At: sec(2)})
	v3, err := rt.Approve(bg, agent, runtime.Approval{RequestID: "w", By: "alice", At: sec(3)})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := rt.Records(agent)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 6 {
		t.Fatalf("%d records, want 6", len(recs))
	}
	want := []string{
		`{"request":{"args":{},"id":"req_2","tool":"pay"},"verdict":{"cost":1,"decision":"allow","reason":"ok","request_id":"req_2","scar":null,"seq":2,"terminated":null}}`,
		`{"request":{"args":{"a":"x","b":1},"id":"w","tool":"wire"},"verdict":{"cost":0,"decision":"pending","reason":"approval_required","request_id":"w","scar":null,"seq":3,"terminated":null}}`,
		`{"approved":true,"approver":"alice","request_id":"w","verdict":{"cost":2,"decision":"allow","reason":"ok","request_id":"w","scar":null,"seq":4,"terminated":"budget_exhausted"}}`,
		`{"reason":"budget_exhausted"}`,
	}
	for i, w := range want {
		if got := string(recs[i+2].Body); got != w {
			t.Errorf("record %d body\n got %s\nwant %s", i+2, got, w)
		}
	}
	if recs[2].At.Format(lineage.TimeLayout) != "2026-01-01T00:00:01.000000001Z" {
		t.Errorf("record 2 at %s", recs[2].At.Format(lineage.TimeLayout))
	}
	if !recs[5].At.Equal(recs[4].At.Time) {
		t.Errorf("caused termination at %v, its cause at %v (D6)", recs[5].At, recs[4].At)
	}
	if v1.Seq != 2 || v2.Seq != 3 || v3.Seq != 4 || v3.Terminated != lineage.BudgetExhausted {
		t.Errorf("verdicts %+v %+v %+v", v1, v2, v3)
	}
}

// TestRecordFormatTrickyStrings: every free-text field of every record kind
// (agent name, args keys and strings, approver, kill note)
// with the characters where encoders differ from RFC 8785: HTML
// characters, U+2028/U+2029, control characters, DEL, quotes and backslashes,
// non-BMP characters (keys are sorted by UTF-16 code units, not bytes), and
// U+FFFD. The lines must stay canonical, verify, and replay.
func TestRecordFormatTrickyStrings(t *testing.T) {
	const tricky = "<a href=\"x\">&amp;</a> \u2028\u2029 \x01\x1f\x7f \\ / \U0001F600 \uFFFD é \t\n\r"
	st := newMem()
	rt := runtime.Open(st, opts("tricky"))
	c := mustCompileYAML(t, `
budget: 10
tools:
  pay: {cost: 1, requires_approval: true}
  note:
    cost: 0
    when: [{expr: "args.ok == true", reason: not_ok, scar: minor}]
`)
	agent := mustCreate(t, rt, c, runtime.CreateOptions{Name: tricky})
	// Names of people may not hold controls or invisible characters (D52: approver names).
	const trickyName = "<a href=\"x\">&amp;</a> \\ / 😀 \uFFFD é e\u0301"
	args := map[string]any{
		tricky: tricky, "\U0001F600": 1, "\uFFFD": 2, "\u00e9": 3, "e\u0301": 4, "": "", "a": []any{tricky, nil, true, 1.5, math.Copysign(0, -1), 5e-324, 1e-7, 123456.789},
	}
	// A request id is addressable text only (D233, request ids a path can hold).
	const trickyID = "a.b_c:d~e-F9"
	v := mustRequest(t, rt, agent, lineage.Request{ID: trickyID, Tool: "pay", Args: args, At: sec(1)})
	if v.Decision != lineage.Pending {
		t.Fatalf("%+v", v)
	}
	if _, err := rt.Approve(bg, agent, runtime.Approval{RequestID: trickyID, By: trickyName + " approver", At: sec(2)}); err != nil {
		t.Fatal(err)
	}
	if v := mustRequest(t, rt, agent, lineage.Request{ID: "smile-1", Tool: "note", Args: map[string]any{"ok": false}, At: sec(3)}); v.Reason != "not_ok" {
		t.Fatalf("constraint deny %+v", v)
	}
	if _, err := rt.Terminate(bg, agent, runtime.Kill{By: trickyName, Note: tricky, At: sec(4)}); err != nil {
		t.Fatal(err)
	}
	for i, line := range storeLines(t, st, agent) {
		canon, err := jcs.Transform(line)
		if err != nil || !bytes.Equal(canon, line) {
			t.Errorf("record %d is not canonical (%v):\nstored %s\ncanon  %s", i, err, line, canon)
		}
	}
	if err := rt.Verify(agent); err != nil {
		t.Fatal(err)
	}
	live := mustState(t, rt, agent)
	replayed := mustState(t, runtime.Open(st, reopenOpts()), agent)
	if !reflect.DeepEqual(normalizeState(live), normalizeState(replayed)) {
		t.Errorf("replay differs:\nlive   %+v\nreplay %+v", live, replayed)
	}
	// The retry of the tricky id is recognized after replay, args compared canonically.
	again, err := runtime.Open(st, reopenOpts()).Request(bg, agent, lineage.Request{ID: trickyID, Tool: "pay", Args: args, At: sec(5)})
	if err != nil || again.Seq != 3 || again.Decision != lineage.Allow {
		t.Errorf("retry after replay: %+v, %v", again, err)
	}
}
