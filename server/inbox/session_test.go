package inbox

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/lineage-guard/lineage/api"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store/file"
)

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// openRuntime is a runtime over a fresh file store.
func openRuntime(t *testing.T) *runtime.Runtime {
	t.Helper()
	st, err := file.Open(t.TempDir(), file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return runtime.Open(st, runtime.Options{})
}

func TestSessionsExpire(t *testing.T) {
	rt := openRuntime(t)
	clk := &clock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	in := New(Backend{
		Runtime:    rt,
		SessionTTL: time.Hour,
		Now:        clk.now,
		Authenticate: func(token string) (api.Principal, bool) { // the one approver of this test
			return api.Principal{Name: "alice", Role: "approver"}, token == "alice-token"
		},
	})
	ts := httptest.NewServer(in)
	defer ts.Close()
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string) (int, string) {
		resp, err := hc.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	_, page := get("/signin")
	resp, err := hc.PostForm(ts.URL+"/signin", url.Values{"csrf": {csrf.FindStringSubmatch(page)[1]}, "token": {"alice-token"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", resp.StatusCode)
	}
	clk.advance(59 * time.Minute)
	code, home := get("/")
	if code != http.StatusOK {
		t.Fatalf("GET / before the session ends: %d", code)
	}
	tok := csrf.FindStringSubmatch(home)[1]
	clk.advance(time.Minute)
	if code, _ := get("/"); code != http.StatusSeeOther {
		t.Errorf("GET / after the session ended: %d, want 303 to /signin", code)
	}
	resp, err = hc.PostForm(ts.URL+"/signout", url.Values{"csrf": {tok}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST with an expired session: %d, want 401", resp.StatusCode)
	}
	in.mu.Lock()
	left := len(in.sessions)
	in.mu.Unlock()
	if left != 0 {
		t.Errorf("%d sessions kept after expiry", left)
	}
}
