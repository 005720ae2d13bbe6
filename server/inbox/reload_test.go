package inbox_test

import (
	"net/http"
	"testing"

	"github.com/lineage-guard/lineage/server"
	"github.com/lineage-guard/lineage/server/servertest"
)

// TestReloadEndsRemovedSessions: an approver removed by a reload (serve on
// SIGHUP) loses the inbox session signed in before it at the next page,
// D335 (a reload ends the sessions of removed principals); one who stays
// keeps hers.
func TestReloadEndsRemovedSessions(t *testing.T) {
	key := server.NewKey()
	svc := servertest.Start(t, servertest.WithConfig(func(c *server.Config) { c.Key = key }))
	e := &env{t: t, url: svc.URL, srv: svc.Server, hs: svc.HTTP, adminTok: svc.AdminToken, apprTok: svc.ApproverToken}
	alice, root := e.browser(), e.browser()
	if code, _ := alice.signIn(e.apprTok); code != http.StatusSeeOther {
		t.Fatalf("alice signs in: %d", code)
	}
	if code, _ := root.signIn(e.adminTok); code != http.StatusSeeOther {
		t.Fatalf("root signs in: %d", code)
	}
	if err := svc.Server.Reload([]server.Entry{{Name: "root", Role: server.RoleAdmin, TokenSHA256: server.TokenSHA256(e.adminTok)}}, []byte("not a key")); err == nil {
		t.Fatal("Reload took a bad key")
	}
	if resp, _ := alice.get("/"); resp.StatusCode != http.StatusOK {
		t.Fatalf("alice after a refused reload: %d, want 200", resp.StatusCode)
	}
	if err := svc.Server.Reload([]server.Entry{{Name: "root", Role: server.RoleAdmin, TokenSHA256: server.TokenSHA256(e.adminTok)}}, key); err != nil {
		t.Fatal(err)
	}
	if resp, _ := alice.get("/"); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/signin" {
		t.Errorf("alice's session after the reload removed her: %d to %q, want 303 to /signin", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, _ := root.get("/"); resp.StatusCode != http.StatusOK {
		t.Errorf("root's session after the reload: %d, want 200", resp.StatusCode)
	}
}
