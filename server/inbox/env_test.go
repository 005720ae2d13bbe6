package inbox_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/server"
	"github.com/lineage-guard/lineage/server/servertest"
)

// testPolicy: pay is allowed up to 100 (a minor scar above), wire waits for a person.
const testPolicy = `{"budget": 10, "scar_limit": 5, "tools": {
  "pay": {"cost": 1, "when": [{"expr": "args.amount <= 100", "reason": "too_much", "scar": "minor"}]},
  "wire": {"cost": 2, "requires_approval": true}}}`

// env is the real service on a free loopback port over a file store.
type env struct {
	t        testing.TB
	url      string
	srv      *server.Server
	hs       *http.Server
	admin    *client.Client
	adminTok string
	apprTok  string
}

func start(t testing.TB) *env {
	t.Helper()
	svc := servertest.Start(t)
	e := &env{t: t, url: svc.URL, srv: svc.Server, hs: svc.HTTP, adminTok: svc.AdminToken, apprTok: svc.ApproverToken}
	e.admin = e.client(svc.AdminToken)
	return e
}

func (e *env) client(token string) *client.Client {
	c, err := client.New(e.url, token, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// agent creates an agent and returns its id, its token and a client with it.
func (e *env) agent(name string) (string, string, *client.Client) {
	e.t.Helper()
	c, err := e.admin.CreateAgent(context.Background(), json.RawMessage(testPolicy), name, "")
	if err != nil {
		e.t.Fatal(err)
	}
	return c.Agent, c.Token, e.client(c.Token)
}

// browser is a cookie-keeping HTTP client that does not follow redirects.
type browser struct {
	t    testing.TB
	base string
	hc   *http.Client
}

func (e *env) browser() *browser {
	jar, err := cookiejar.New(nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return &browser{t: e.t, base: e.url, hc: &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (b *browser) get(path string) (*http.Response, string) {
	b.t.Helper()
	resp, err := b.hc.Get(b.base + path)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func (b *browser) post(path string, form url.Values) (*http.Response, string) {
	b.t.Helper()
	resp, err := b.hc.PostForm(b.base+path, form)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func csrfOf(t testing.TB, html string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(html)
	if m == nil {
		t.Fatalf("no csrf field in the page:\n%s", html)
	}
	return m[1]
}

// signIn signs in with token and returns the status of the POST and the session's CSRF token.
func (b *browser) signIn(token string) (int, string) {
	b.t.Helper()
	_, page := b.get("/signin")
	resp, body := b.post("/signin", url.Values{"csrf": {csrfOf(b.t, page)}, "token": {token}})
	if resp.StatusCode != http.StatusSeeOther {
		return resp.StatusCode, body
	}
	_, home := b.get("/")
	return resp.StatusCode, csrfOf(b.t, home)
}

func (b *browser) hasCookie(name string) bool {
	u, _ := url.Parse(b.base)
	for _, c := range b.hc.Jar.Cookies(u) {
		if c.Name == name && c.Value != "" {
			return true
		}
	}
	return false
}

func contains(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
