package server_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExactMemberNames: a member name that differs from a field's only in
// case or by a look-alike letter is an unknown member, named with its pointer,
// never that field (D232, member names matched exactly). encoding/json folded
// {"tool":"pay","Tool":"read"} into the tool read, and "argſ" into args.
func TestExactMemberNames(t *testing.T) {
	e := start(t)
	agent, _ := e.agent()
	tok := e.agentToken(agent)
	admin := e.tokens["admin"]
	before := e.lines(agent)
	req := "/v1/agents/" + agent + "/requests"
	for _, c := range []struct{ path, token, body, want string }{
		{req, tok, `{"tool":"pay","Tool":"read"}`, "/Tool: unknown field"},
		{req, tok, `{"TOOL":"read"}`, "/TOOL: unknown field"},
		{req, tok, `{"tool":"pay","argſ":{"amount":1}}`, "/argſ: unknown field"},
		{req, tok, `{"tool":"pay","ID":"x"}`, "/ID: unknown field"},
		{req, tok, `{"tool":"pay","args":{"amount":1},"Args":{"amount":500}}`, "/Args: unknown field"},
		{"/v1/agents/" + agent + "/terminate", admin, `{"Reason":"x"}`, "/Reason: unknown field"},
		{"/v1/agents", admin, `{"Policy":` + testPolicy + `}`, "/Policy: unknown field"},
	} {
		code, body := e.raw("POST", c.path, c.token, c.body)
		msg, _ := body["message"].(string)
		if code != 400 || body["code"] != "bad_request" || !strings.Contains(msg, c.want) {
			t.Errorf("%s: %d %v, want 400 bad_request naming %q", c.body, code, body, c.want)
		}
	}
	if got := e.lines(agent); got != before {
		t.Errorf("refused bodies were recorded: %d records, were %d", got, before)
	}
	if ids, _ := e.admin.Agents(bg); len(ids) != 1 {
		t.Errorf("a refused create made an agent: %v", ids)
	}
}

// TestNumbersADoubleHolds: a number in args whose shortest double form has
// another value than the number as written is malformed, nothing recorded
// (D231, numbers a double holds); equal values are the same number for
// idempotency. The service rounded 100.000000000000001 to 100 and 1e-400 to 0,
// and decided and recorded those.
func TestNumbersADoubleHolds(t *testing.T) {
	e := start(t)
	agent, _ := e.agent()
	tok := e.agentToken(agent)
	req := "/v1/agents/" + agent + "/requests"
	before := e.lines(agent)
	for _, n := range []string{"100.000000000000001", "1e-400", "1e400", "-1e400", "9007199254740993", "0.10000000000000000001"} {
		body := `{"tool":"pay","args":{"amount":` + n + `,"to":"x"}}`
		code, out := e.raw("POST", req, tok, body)
		msg, _ := out["message"].(string)
		if code != 400 || out["code"] != "bad_request" || !strings.Contains(msg, "/args/amount") || !strings.Contains(msg, n) {
			t.Errorf("amount %s: %d %v, want 400 bad_request naming /args/amount", n, code, out)
		}
	}
	if got := e.lines(agent); got != before {
		t.Fatalf("malformed numbers were recorded: %d records, were %d", got, before)
	}
	for i, n := range []string{"0.1", "1.0", "1e2", "-2.5e-3", "-0"} {
		body := fmt.Sprintf(`{"id":"n%d","tool":"pay","args":{"amount":%s}}`, i, n)
		if code, out := e.raw("POST", req, tok, body); code != 200 {
			t.Errorf("amount %s: %d %v, want 200", n, code, out)
		}
	}
	// The log holds the canonical form: 1e2 is 100, 1.0 is 1, -0 is 0.
	log, err := os.ReadFile(filepath.Join(e.dir, agent+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"args":{"amount":0.1}`, `"args":{"amount":1}`, `"args":{"amount":100}`, `"args":{"amount":-0.0025}`, `"args":{"amount":0}`} {
		if !bytes.Contains(log, []byte(want)) {
			t.Errorf("the log lacks %s", want)
		}
	}
	// 1 and 1.0 are one number: the retry is the same request, not id_conflict.
	code, first := e.raw("POST", req, tok, `{"id":"same","tool":"pay","args":{"amount":1}}`)
	if code != 200 {
		t.Fatalf("first: %d %v", code, first)
	}
	n := e.lines(agent)
	for _, again := range []string{"1.0", "1e0", "10e-1", "1.000"} {
		code, v := e.raw("POST", req, tok, `{"id":"same","tool":"pay","args":{"amount":`+again+`}}`)
		if code != 200 || v["seq"] != first["seq"] || v["decision"] != first["decision"] {
			t.Errorf("retry with %s: %d %v, want the verdict %v", again, code, v, first)
		}
	}
	if code, v := e.raw("POST", req, tok, `{"id":"same","tool":"pay","args":{"amount":2}}`); code != 409 || v["code"] != "id_conflict" {
		t.Errorf("other args under the same id: %d %v, want 409 id_conflict", code, v)
	}
	if got := e.lines(agent); got != n {
		t.Errorf("retries were recorded: %d records, were %d", got, n)
	}
}

// TestRequestIDsAddressable: an id the API could not put in a path is
// malformed (D233, request ids a path can hold); every id it accepts can be
// approved. Pending requests with ids ".", ".." and "../zz" used to sit in the
// inbox for good.
func TestRequestIDsAddressable(t *testing.T) {
	e := start(t)
	agent, _ := e.agent()
	tok := e.agentToken(agent)
	req := "/v1/agents/" + agent + "/requests"
	before := e.lines(agent)
	for _, id := range []string{".", "..", "../zz", "a/b", "a b", "a%2Fb", "é", "a?b", "a#b", strings.Repeat("i", 129), ""} {
		body, _ := json.Marshal(map[string]any{"id": id, "tool": "wire"})
		code, out := e.raw("POST", req, tok, string(body))
		if id == "" { // no id: the runtime assigns one
			if code != 200 {
				t.Errorf("empty id: %d %v", code, out)
			}
			before++
			continue
		}
		if code != 400 || out["code"] != "bad_request" || !strings.Contains(fmt.Sprint(out["message"]), "id") {
			t.Errorf("id %q: %d %v, want 400 bad_request", id, code, out)
		}
	}
	if got := e.lines(agent); got != before {
		t.Fatalf("bad ids were recorded: %d records, were %d", got, before)
	}
	for _, id := range []string{"...", "aZ09._:~-", "~", strings.Repeat("j", 128)} {
		body, _ := json.Marshal(map[string]any{"id": id, "tool": "wire"})
		if code, out := e.raw("POST", req, tok, string(body)); code != 200 || out["decision"] != "pending" {
			t.Fatalf("id %q: %d %v, want a pending verdict", id, code, out)
		}
		code, out := e.raw("POST", req+"/"+id+"/approve", e.tokens["approver"], "")
		if code != 200 || out["decision"] != "allow" {
			t.Errorf("approve %q: %d %v, want allow", id, code, out)
		}
	}
}

// TestTokenOneSpelling: an agent token with other trailing base64 bits names
// the same bytes to a lenient decoder; it is unknown (401).
func TestTokenOneSpelling(t *testing.T) {
	e := start(t)
	agent, _ := e.agent()
	tok := e.agentToken(agent)
	path := "/v1/agents/" + agent
	if code, out := e.raw("GET", path, tok, ""); code != 200 {
		t.Fatalf("the token itself: %d %v", code, out)
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	raw := strings.TrimPrefix(tok, "lga_")
	if len(raw)%4 == 0 {
		t.Fatalf("token %q has no unused trailing bits; the test needs another agent id length", tok)
	}
	last := strings.IndexByte(alphabet, raw[len(raw)-1])
	spellings := 0
	for i := range 4 {
		c := alphabet[last&^3|i]
		other := "lga_" + raw[:len(raw)-1] + string(c)
		if other == tok {
			continue
		}
		if b, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(other, "lga_")); err != nil || len(b) == 0 {
			continue // not a lenient spelling of the same bytes
		}
		spellings++
		if code, out := e.raw("GET", path, other, ""); code != 401 || out["code"] != "unauthorized" {
			t.Errorf("token with altered trailing bits %q: %d %v, want 401", other, code, out)
		}
	}
	if spellings == 0 {
		t.Fatal("found no other lenient spelling of the token; the test tests nothing")
	}
}

// TestMetricsReasonsBounded: an extension's deny reason chosen from args
// never becomes a label value (D234, metric labels from fixed sets): any
// reason outside the runtime's own is counted as "extension".
func TestMetricsReasonsBounded(t *testing.T) {
	e := start(t)
	policy := `{"budget": 1000, "tools": {"pay": {"cost": 0}}, "rego": [{"source": "package lineage.ext.echo\n\ndeny contains {\"reason\": input.request.args.why, \"scar\": \"none\"} if input.request.args.why\n"}]}`
	c, err := e.admin.CreateAgent(bg, json.RawMessage(policy), "echo", "")
	if err != nil {
		t.Fatal(err)
	}
	const xss = `<img src=x onerror=alert(1)>`
	reasons := []string{xss}
	for i := range 60 {
		reasons = append(reasons, fmt.Sprintf("reason_%d", i))
	}
	for _, r := range reasons {
		body, _ := json.Marshal(map[string]any{"tool": "pay", "args": map[string]any{"why": r}})
		code, out := e.raw("POST", "/v1/agents/"+c.Agent+"/requests", c.Token, string(body))
		if code != 200 || out["decision"] != "deny" || out["reason"] != r {
			t.Fatalf("deny %q: %d %v", r, code, out)
		}
	}
	resp, err := http.Get(e.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if bytes.Contains(m, []byte("onerror")) || bytes.Contains(m, []byte("reason_1")) || bytes.Contains(m, []byte("img")) {
		t.Errorf("a reason chosen from args is in /metrics")
	}
	if want := fmt.Sprintf(`lineage_decisions_total{decision="deny",reason="extension"} %d`, len(reasons)); !bytes.Contains(m, []byte(want)) {
		t.Errorf("metrics lack %s", want)
	}
	if n := bytes.Count(m, []byte("lineage_decisions_total{")); n > 2 {
		t.Errorf("%d series of lineage_decisions_total, want them bounded by the code", n)
	}
}
