package server_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/lineage-guard/lineage"
)

// TestApproveUnknownRequest: approving or rejecting a request the agent
// never made is 404 unknown_request; one it made that is not pending (an
// allow, a decided approval) stays 409 not_pending. D303 (approving a
// request never made).
func TestApproveUnknownRequest(t *testing.T) {
	e := start(t)
	agent, ac := e.agent()
	if _, err := ac.Request(bg, agent, lineage.Request{ID: "p1", Tool: "pay", Args: map[string]any{"amount": 1}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path   string
		status int
		code   string
	}{
		{"/requests/nope/approve", http.StatusNotFound, "unknown_request"},
		{"/requests/nope/reject", http.StatusNotFound, "unknown_request"},
		{"/requests/p1/approve", http.StatusConflict, "not_pending"},
	} {
		status, body := e.raw("POST", "/v1/agents/"+agent+c.path, e.tokens["approver"], "")
		if status != c.status || body["code"] != c.code {
			t.Errorf("POST %s: %d %v, want %d %s", c.path, status, body, c.status, c.code)
		}
	}
	if e.lines(agent) != 3 {
		t.Errorf("the log has %d records, want 3: an error records nothing", e.lines(agent))
	}
}

// TestUnknownTokenSaysWhere: the 401 of a token the server does not know
// says where its tokens come from, so that an admin.token that stopped
// working under --auth explains itself. D307 (under --auth, admin.token is
// not a key).
func TestUnknownTokenSaysWhere(t *testing.T) {
	e := start(t)
	status, body := e.raw("GET", "/v1/agents", "lgt_nobody", "")
	if status != http.StatusUnauthorized || body["code"] != "unauthorized" ||
		!strings.Contains(fmt.Sprint(body["message"]), "--auth file, or, without --auth, the admin token") {
		t.Errorf("an unknown token: %d %v", status, body)
	}
}
