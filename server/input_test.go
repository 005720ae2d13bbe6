package server_test

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lineage-guard/lineage"
)

// TestAuth calls every endpoint with no token, an unknown one, another
// agent's and, where an agent has no right, the agent's own: 401 and 403, and
// nothing recorded.
func TestAuth(t *testing.T) {
	e := start(t)
	agent, bot := e.agent()
	other, _ := e.agent()
	_ = other
	created, err := e.admin.CreateAgent(bg, []byte(testPolicy), "", "")
	if err != nil {
		t.Fatal(err)
	}
	otherTok := created.Token
	if _, err := bot.Request(bg, agent, lineage.Request{ID: "w", Tool: "wire"}); err != nil {
		t.Fatal(err)
	}
	before := e.lines(agent)
	botTok := e.agentToken(agent)

	a := "/v1/agents/" + agent
	type call struct{ method, path, body string }
	all := []call{
		{"POST", "/v1/agents", `{"policy": ` + testPolicy + `}`},
		{"GET", "/v1/agents", ""},
		{"GET", "/v1/whoami", ""},
		{"GET", a, ""},
		{"GET", a + "/policy", ""},
		{"POST", a + "/requests", `{"tool": "pay", "args": {"amount": 1}}`},
		{"GET", a + "/requests/w", ""},
		{"POST", a + "/requests/w/approve", ""},
		{"POST", a + "/requests/w/reject", ""},
		{"POST", a + "/terminate", ""},
		{"GET", a + "/log", ""},
		{"GET", a + "/verify", ""},
		{"GET", "/v1/pending", ""},
		{"GET", "/v1/events", ""},
	}
	for _, c := range all {
		for _, tok := range []string{"", "nonsense", "lga_bm9wZQ", otherTok[:len(otherTok)-2] + "AA"} {
			if code, body := e.raw(c.method, c.path, tok, c.body); code != 401 || body["code"] != "unauthorized" {
				t.Errorf("%s %s with token %q: %d %v, want 401 unauthorized", c.method, c.path, tok, code, body)
			}
		}
		if c.path == "/v1/whoami" {
			continue
		}
		// Another agent's token: never on this agent, never on staff calls.
		if code, body := e.raw(c.method, c.path, otherTok, c.body); code != 403 || body["code"] != "forbidden" {
			t.Errorf("%s %s with another agent's token: %d %v, want 403", c.method, c.path, code, body)
		}
	}
	// The agent's own token: only its own state, policy, requests and verdicts.
	own := map[string]bool{"GET " + a: true, "GET " + a + "/policy": true, "POST " + a + "/requests": true, "GET " + a + "/requests/w": true}
	for _, c := range all {
		if own[c.method+" "+c.path] || c.path == "/v1/whoami" {
			continue
		}
		if code, body := e.raw(c.method, c.path, botTok, c.body); code != 403 || body["code"] != "forbidden" {
			t.Errorf("%s %s with the agent's own token: %d %v, want 403", c.method, c.path, code, body)
		}
	}
	// An approver creates no agents and decides no requests of agents.
	for _, c := range []call{all[0], all[5]} {
		if code, body := e.raw(c.method, c.path, e.tokens["approver"], c.body); code != 403 {
			t.Errorf("%s %s as approver: %d %v, want 403", c.method, c.path, code, body)
		}
	}
	if got := e.lines(agent); got != before {
		t.Errorf("refused calls recorded something: %d records, were %d", got, before)
	}
	if e.lines(other) != 2 {
		t.Errorf("the other agent's log changed")
	}
}

// TestBadInput sends malformed bodies and paths: a clear 400 (or 413), and nothing recorded.
func TestBadInput(t *testing.T) {
	e := start(t)
	agent, _ := e.agent()
	tok := e.agentToken(agent)
	admin := e.tokens["admin"]
	before := e.lines(agent)
	req := "/v1/agents/" + agent + "/requests"
	big := `{"tool": "pay", "args": {"x": "` + strings.Repeat("a", 2<<20) + `"}}`
	cases := []struct {
		name, method, path, token, body string
		status                          int
		code, message                   string
	}{
		{"empty body", "POST", req, tok, "", 400, "bad_request", "empty"},
		{"not JSON", "POST", req, tok, `{"tool": pay}`, 400, "bad_request", "not JSON"},
		{"truncated", "POST", req, tok, `{"tool": "pay"`, 400, "bad_request", "not JSON"},
		{"two objects", "POST", req, tok, `{"tool": "pay"} {}`, 400, "bad_request", "after the JSON object"},
		{"array", "POST", req, tok, `[]`, 400, "bad_request", "JSON object"},
		{"unknown field", "POST", req, tok, `{"tool": "pay", "tol": 1}`, 400, "bad_request", "/tol: unknown field"},
		{"at in body", "POST", req, tok, `{"tool": "pay", "at": "2030-01-01T00:00:00Z"}`, 400, "bad_request", "/at"},
		{"tool a number", "POST", req, tok, `{"tool": 5}`, 400, "bad_request", "/tool: expected a string"},
		{"args an array", "POST", req, tok, `{"tool": "pay", "args": [1]}`, 400, "bad_request", "/args: expected an object"},
		{"no tool", "POST", req, tok, `{"args": {}}`, 400, "bad_request", "tool is required"},
		{"bad tool name", "POST", req, tok, `{"tool": "a b"}`, 400, "bad_request", "does not match"},
		{"duplicate key", "POST", req, tok, `{"tool": "pay", "args": {"a": 1, "a": 2}}`, 400, "bad_request", `/args/a: duplicate key`},
		{"duplicate top key", "POST", req, tok, `{"tool": "pay", "tool": "wire"}`, 400, "bad_request", "duplicate key"},
		{"lone surrogate", "POST", req, tok, `{"tool": "pay", "args": {"a": "\ud800"}}`, 400, "bad_request", "lone surrogate"},
		{"lone low surrogate in a key", "POST", req, tok, `{"tool": "pay", "args": {"\udc00": 1}}`, 400, "bad_request", "lone surrogate"},
		{"invalid UTF-8", "POST", req, tok, "{\"tool\": \"pay\", \"args\": {\"s\": \"\xff\"}}", 400, "bad_request", "UTF-8"},
		{"too deep", "POST", req, tok, `{"tool": "pay", "args": {"a": ` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}}`, 400, "bad_request", "deeper"},
		{"2 MiB body", "POST", req, tok, big, 413, "too_large", "1 MiB"},
		{"reserved id", "POST", req, tok, `{"id": "req_7", "tool": "pay"}`, 400, "bad_request", "reserved"},
		{"approve with a by", "POST", "/v1/agents/" + agent + "/requests/x/approve", admin, `{"by": "mallory"}`, 400, "bad_request", "/by: unknown field"},
		{"terminate with a by", "POST", "/v1/agents/" + agent + "/terminate", admin, `{"by": "mallory"}`, 400, "bad_request", "/by: unknown field"},
		{"terminate reason a number", "POST", "/v1/agents/" + agent + "/terminate", admin, `{"reason": 1}`, 400, "bad_request", "/reason: expected a string"},
		{"dot-dot", "POST", "/v1/agents/" + agent + "/../" + agent + "/requests", tok, `{"tool": "pay"}`, 400, "bad_request", "not clean"},
		{"encoded dot-dot", "POST", "/v1/agents/x/%2e%2e/" + agent + "/requests", tok, `{"tool": "pay"}`, 400, "bad_request", "not clean"},
		{"encoded slash in agent", "POST", "/v1/agents/" + agent + "%2Fx/requests", admin, `{"tool": "pay"}`, 404, "unknown_agent", "not an agent id"},
		{"encoded slash tricks", "POST", "/v1/agents/x%2F..%2F" + agent + "/requests", admin, `{"tool": "pay"}`, 400, "bad_request", "not clean"},
		{"trailing slash", "POST", req + "/", tok, `{"tool": "pay"}`, 400, "bad_request", "not clean"},
		{"double slash", "POST", "/v1//agents/" + agent + "/requests", tok, `{"tool": "pay"}`, 400, "bad_request", "not clean"},
		{"unknown route", "GET", "/v1/nothing", admin, "", 404, "not_found", "no route"},
		{"wrong method", "DELETE", "/v1/agents/" + agent, admin, "", 405, "method_not_allowed", "allowed"},
		{"log from not a number", "GET", "/v1/agents/" + agent + "/log?from=x", admin, "", 400, "bad_request", "from="},
		{"unknown query", "GET", "/v1/agents/" + agent + "/log?form=1", admin, "", 400, "bad_request", "unknown query"},
		{"policy invalid", "POST", "/v1/agents", admin, `{"policy": {"budget": 1, "tools": {}, "scar_limt": 3}}`, 400, "invalid_policy", "invalid"},
		{"policy rego path", "POST", "/v1/agents", admin, `{"policy": {"budget": 1, "tools": {}, "rego": [{"path": "/etc/passwd"}]}}`, 400, "invalid_policy", "invalid"},
		{"policy missing", "POST", "/v1/agents", admin, `{"name": "x"}`, 400, "bad_request", "/policy"},
		{"policy a string", "POST", "/v1/agents", admin, `{"policy": "budget: 1"}`, 400, "bad_request", "/policy"},
		{"unknown parent", "POST", "/v1/agents", admin, `{"policy": ` + testPolicy + `, "parent": "agt_gone"}`, 404, "unknown_agent", "agt_gone"},
	}
	for _, c := range cases {
		code, body := e.raw(c.method, c.path, c.token, c.body)
		msg, _ := body["message"].(string)
		if code != c.status || body["code"] != c.code || !strings.Contains(msg, c.message) {
			t.Errorf("%s: %d %v, want %d %s containing %q", c.name, code, body, c.status, c.code, c.message)
		}
	}
	if got := e.lines(agent); got != before {
		t.Errorf("bad input recorded something: %d records, were %d", got, before)
	}
	ids, _ := e.admin.Agents(bg)
	if len(ids) != 1 {
		t.Errorf("bad creates made agents: %+v", ids)
	}
	// The invalid policy's diagnostics are check --format json's.
	_, body := e.raw("POST", "/v1/agents", admin, `{"policy": {"budget": 1, "tools": {}, "scar_limt": 3}}`)
	diags, _ := body["errors"].([]any)
	if len(diags) != 1 || diags[0].(map[string]any)["pointer"] != "/scar_limt" || diags[0].(map[string]any)["code"] != "unknown_field" {
		t.Errorf("invalid policy diagnostics: %v", body["errors"])
	}
}

// TestSlowClients: a client that never finishes its headers is cut off by
// ReadHeaderTimeout rather than holding a connection forever.
func TestSlowClients(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the header timeout")
	}
	e := start(t)
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "GET /health HTTP/1.1\r\nHost: x\r\n") // and never the blank line
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 512)
	n, err := conn.Read(buf)
	if err == nil && !strings.Contains(string(buf[:n]), "408") {
		t.Errorf("a slow header got %q", buf[:n])
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Errorf("the server kept a half-sent request open for 20 s")
	}
	_ = http.StatusRequestTimeout
}

// TestBearerScheme: the scheme is case-insensitive (RFC 7235); anything else is 401.
func TestBearerScheme(t *testing.T) {
	e := start(t)
	for header, want := range map[string]int{
		"bearer " + e.tokens["admin"]: 200, "BEARER " + e.tokens["admin"]: 200,
		"Basic " + e.tokens["admin"]: 401, e.tokens["admin"]: 401, "Bearer ": 401, "Bearer  ": 401,
	} {
		req, _ := http.NewRequest("GET", e.url+"/v1/whoami", nil)
		req.Header.Set("Authorization", header)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Authorization %.12q…: %d, want %d", header, resp.StatusCode, want)
		}
	}
}
