package inbox_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/lineage-guard/lineage"
)

const xss = `<img src=x onerror=alert(1)>`

func TestSecurityHeaders(t *testing.T) {
	e := start(t)
	b := e.browser()
	for _, path := range []string{"/signin", "/", "/static/app.js"} {
		resp, _ := b.get(path)
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("%s: Content-Security-Policy %q", path, csp)
		}
		if got := resp.Header.Get("X-Frame-Options"); got != "DENY" {
			t.Errorf("%s: X-Frame-Options %q, want DENY", path, got)
		}
		if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s: X-Content-Type-Options %q", path, got)
		}
	}
	// Inbox routes are counted like the API's.
	if _, m := b.get("/metrics"); !strings.Contains(m, `lineage_http_requests_total{code="200",route="/signin"}`) {
		t.Error("/metrics does not count GET /signin")
	}
	// The API keeps its own answers: an unknown /v1 route is still JSON.
	resp, body := b.get("/v1/nothing")
	if resp.StatusCode != 404 || !strings.Contains(body, `"not_found"`) {
		t.Errorf("GET /v1/nothing: %d %s", resp.StatusCode, body)
	}
}

func TestSignIn(t *testing.T) {
	e := start(t)
	_, agentTok, _ := e.agent("bot")

	b := e.browser()
	if resp, _ := b.get("/"); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/signin" {
		t.Fatalf("GET / signed out: %d to %q, want 303 to /signin", resp.StatusCode, resp.Header.Get("Location"))
	}
	if code, body := b.signIn(agentTok); code != http.StatusForbidden || !strings.Contains(body, "Agent tokens cannot sign in") {
		t.Errorf("agent token: %d, want 403 saying agent tokens cannot sign in", code)
	}
	if code, _ := b.signIn("lgt_unknown"); code != http.StatusUnauthorized {
		t.Errorf("unknown token: %d, want 401", code)
	}
	if b.hasCookie("lineage_session") {
		t.Fatal("a refused sign-in left a session cookie")
	}
	// Sign-in itself needs its form token (login CSRF).
	resp, _ := b.post("/signin", url.Values{"token": {e.apprTok}})
	if resp.StatusCode != http.StatusForbidden || b.hasCookie("lineage_session") {
		t.Errorf("sign-in without its CSRF token: %d, want 403 and no session", resp.StatusCode)
	}

	_, page := b.get("/signin")
	resp, _ = b.post("/signin", url.Values{"csrf": {csrfOf(t, page)}, "token": {e.apprTok}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("approver sign-in: %d", resp.StatusCode)
	}
	var sc *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "lineage_session" {
			sc = c
		}
	}
	if sc == nil || !sc.HttpOnly || sc.SameSite != http.SameSiteStrictMode || sc.Secure || sc.MaxAge <= 0 {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, a Max-Age, not Secure without TLS", sc)
	}
	if resp, body := b.get("/"); resp.StatusCode != 200 || !contains(body, "alice (approver)", "Sign out") {
		t.Fatalf("GET / signed in: %d", resp.StatusCode)
	}
	if strings.Contains(sc.Value, e.apprTok) {
		t.Fatal("the session cookie holds the token")
	}
}

func TestSessionCookieSecureUnderTLS(t *testing.T) {
	e := start(t)
	ts := httptest.NewTLSServer(e.srv)
	defer ts.Close()
	hc := ts.Client()
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := hc.Get(ts.URL + "/signin")
	if err != nil {
		t.Fatal(err)
	}
	var pre *http.Cookie
	for _, c := range resp.Cookies() {
		pre = c
	}
	var sb strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	resp.Body.Close()
	req, _ := http.NewRequest("POST", ts.URL+"/signin", strings.NewReader(url.Values{"csrf": {csrfOf(t, sb.String())}, "token": {e.adminTok}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(pre)
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	found := false
	for _, c := range resp.Cookies() {
		if c.Name == "lineage_session" {
			found = true
			if !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
				t.Errorf("session cookie under TLS: %+v, want Secure, HttpOnly, SameSite=Strict", c)
			}
		}
	}
	if !found || resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in under TLS: %d, session cookie %v", resp.StatusCode, found)
	}
}

func TestFormsNeedTheCSRFToken(t *testing.T) {
	e := start(t)
	agent, _, bot := e.agent("bot")
	ctx := context.Background()
	v, err := bot.Request(ctx, agent, lineage.Request{ID: "w1", Tool: "wire", Args: map[string]any{"to": "x"}})
	if err != nil || v.Decision != lineage.Pending {
		t.Fatalf("wire: %+v %v", v, err)
	}
	b := e.browser()
	code, csrf := b.signIn(e.apprTok)
	if code != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", code)
	}
	approve := "/agents/" + agent + "/requests/w1/approve"
	for _, form := range []url.Values{{}, {"csrf": {"forged"}}, {"csrf": {csrf + "x"}}} {
		if resp, _ := b.post(approve, form); resp.StatusCode != http.StatusForbidden {
			t.Errorf("approve with csrf %q: %d, want 403", form.Get("csrf"), resp.StatusCode)
		}
	}
	if resp, _ := b.post("/agents/"+agent+"/terminate", url.Values{"confirm": {"yes"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("terminate without csrf: %d, want 403", resp.StatusCode)
	}
	if resp, _ := b.post("/signout", url.Values{}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("sign-out without csrf: %d, want 403", resp.StatusCode)
	}
	if v, err := bot.Verdict(ctx, agent, "w1", 0); err != nil || v.Decision != lineage.Pending {
		t.Fatalf("after the refused forms w1 is %+v %v, want still pending", v, err)
	}
	resp, _ := b.post(approve, url.Values{"csrf": {csrf}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("approve with the token: %d", resp.StatusCode)
	}
	v, err = bot.Verdict(ctx, agent, "w1", 0)
	if err != nil || v.Decision != lineage.Allow {
		t.Fatalf("after approve: %+v %v, want allow", v, err)
	}
	// The approver of record is the signed-in principal.
	log, err := e.admin.Log(ctx, agent, 3)
	if err != nil || !strings.Contains(string(log), `"approver":"alice"`) {
		t.Fatalf("approval record: %s %v", log, err)
	}
	// The kill switch needs its confirmation too.
	if resp, _ := b.post("/agents/"+agent+"/terminate", url.Values{"csrf": {csrf}}); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("terminate unconfirmed: %d, want 400", resp.StatusCode)
	}
	if resp, _ := b.post("/agents/"+agent+"/terminate", url.Values{"csrf": {csrf}, "confirm": {"yes"}, "note": {"test"}}); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("terminate: %d, want 303", resp.StatusCode)
	}
	st, err := e.admin.State(ctx, agent)
	if err != nil || st.Status != lineage.Terminated || st.Termination != lineage.Killed {
		t.Fatalf("after the kill switch: %+v %v", st, err)
	}
	if log, _ := e.admin.Log(ctx, agent, 4); !strings.Contains(string(log), `"by":"alice"`) {
		t.Errorf("termination record: %s", log)
	}
}

func TestSignOutClearsTheSession(t *testing.T) {
	e := start(t)
	b := e.browser()
	code, csrf := b.signIn(e.adminTok)
	if code != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", code)
	}
	u, _ := url.Parse(e.url)
	old := b.hc.Jar.Cookies(u)
	resp, _ := b.post("/signout", url.Values{"csrf": {csrf}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", resp.StatusCode)
	}
	cleared := false
	for _, c := range resp.Cookies() {
		if c.Name == "lineage_session" && c.MaxAge < 0 {
			cleared = true
		}
	}
	if !cleared {
		t.Error("sign-out did not clear the cookie")
	}
	// The old cookie, replayed, is dead on the server too.
	b2 := e.browser()
	b2.hc.Jar.SetCookies(u, old)
	if resp, _ := b2.get("/"); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("GET / with the signed-out cookie: %d, want 303 to /signin", resp.StatusCode)
	}
}

func TestAgentStringsAreText(t *testing.T) {
	e := start(t)
	agent, _, bot := e.agent(xss)
	ctx := context.Background()
	if _, err := bot.Request(ctx, agent, lineage.Request{ID: "x1", Tool: "wire", Args: map[string]any{"note": xss}}); err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	if code, _ := b.signIn(e.apprTok); code != http.StatusSeeOther {
		t.Fatal(code)
	}
	for _, path := range []string{"/", "/inbox/pending", "/agents", "/agents/" + agent} {
		resp, body := b.get(path)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
		if strings.Contains(body, "<img") {
			t.Errorf("%s: an agent's string became markup", path)
		}
		if !strings.Contains(body, "&lt;img src=x onerror=alert(1)&gt;") {
			t.Errorf("%s: the agent's string is not shown as text", path)
		}
	}
}

func TestErrorsAnswerInKind(t *testing.T) {
	e := start(t)
	agent, _, bot := e.agent("bot")
	ctx := context.Background()
	if _, err := bot.Request(ctx, agent, lineage.Request{ID: "w1", Tool: "wire"}); err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	_, csrf := b.signIn(e.apprTok)
	if resp, body := b.get("/agents/agt_nobody"); resp.StatusCode != 404 || !contains(body, "unknown_agent", "Back to the inbox") {
		t.Errorf("unknown agent page: %d", resp.StatusCode)
	}
	if resp, _ := b.post("/agents/"+agent+"/requests/w1/reject", url.Values{"csrf": {csrf}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("reject: %d", resp.StatusCode)
	}
	// A second decision, as the script sends it, is the API's 409 not_pending, as JSON.
	req, _ := http.NewRequest("POST", e.url+"/agents/"+agent+"/requests/w1/approve", strings.NewReader(url.Values{"csrf": {csrf}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := b.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusConflict || body["code"] != "not_pending" {
		t.Errorf("approve after reject: %d %v %v, want 409 not_pending", resp.StatusCode, body, err)
	}
	// The live stream needs a session.
	if resp, _ := e.browser().get("/inbox/events"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("events without a session: %d, want 401", resp.StatusCode)
	}
}

func TestAgentsList(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	a1, _, bot1 := e.agent("scarred")
	for _, amount := range []int{5, 500} { // allowed (1 credit), then a minor scar
		if _, err := bot1.Request(ctx, a1, lineage.Request{Tool: "pay", Args: map[string]any{"amount": amount}}); err != nil {
			t.Fatal(err)
		}
	}
	a2, _, _ := e.agent("killed")
	if _, err := e.admin.Terminate(ctx, a2, "test"); err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.signIn(e.apprTok)
	resp, body := b.get("/agents")
	if resp.StatusCode != 200 {
		t.Fatal(resp.StatusCode)
	}
	rowOf := func(agent string) string {
		i := strings.Index(body, `data-agent="`+agent+`"`)
		if i < 0 {
			t.Fatalf("no row for %s", agent)
		}
		end := strings.Index(body[i:], "</tr>")
		return strings.Join(strings.Fields(body[i:i+end]), " ")
	}
	if r := rowOf(a1); !contains(r, "scarred", "● alive", "9 / 10", `value="1"`, "1 / 5") {
		t.Errorf("the scarred agent's row: %s", r)
	}
	if r := rowOf(a2); !contains(r, "killed", "☠ terminated", "10 / 10", "0 / 5") {
		t.Errorf("the killed agent's row: %s", r)
	}
}
