package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/lineage-guard/lineage/api"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/server"
	"github.com/lineage-guard/lineage/server/servertest"
)

// TestKeysFrom: a key ring is one hex key a line, first first; blank lines
// and # comments are skipped; a bad line is named. D331 (comments in the
// key ring).
func TestKeysFrom(t *testing.T) {
	a, b := strings.TrimSpace(string(server.NewKey())), strings.TrimSpace(string(server.NewKey()))
	keys, err := server.KeysFrom([]byte("# new, 2026-12-02\n" + b + "\n\n  " + a + "  \n"))
	if err != nil || len(keys) != 2 {
		t.Fatalf("KeysFrom: %d keys, %v; want 2", len(keys), err)
	}
	for _, c := range []struct{ text, want string }{
		{"", "holds no key"},
		{"# only a comment\n", "holds no key"},
		{a + "\nzz\n", "line 2: "},
		{"00ff\n", "line 1: "},
	} {
		if _, err := server.KeysFrom([]byte(c.text)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("KeysFrom(%q): %v; want %q", c.text, err, c.want)
		}
	}
}

// TestReloadUnderLoad: Reload swaps principals and keys while requests run
// (under -race): every call either meets the old set or the new one, and a
// token made under the old first key verifies after the rotation. D333 (the
// key ring), D334 (SIGHUP reloads the auth file and the key ring).
func TestReloadUnderLoad(t *testing.T) {
	oldKey, newKey := server.NewKey(), server.NewKey()
	svc := servertest.Start(t, servertest.WithConfig(func(c *server.Config) { c.Key, c.AgentRPS = oldKey, -1 }))
	ctx := context.Background()
	admin, _ := client.New(svc.URL, svc.AdminToken, nil)
	cr, err := admin.CreateAgent(ctx, json.RawMessage(`{"budget": 1000000, "tools": {"t": {"cost": 1}}}`), "", "")
	if err != nil {
		t.Fatal(err)
	}
	root := []server.Entry{{Name: "root", Role: server.RoleAdmin, TokenSHA256: server.TokenSHA256(svc.AdminToken)}}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bot, _ := client.New(svc.URL, cr.Token, nil)
			bot.Retries = 0
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := bot.Request(ctx, cr.Agent, lineage.Request{Tool: "t"}); err != nil {
					t.Errorf("a request during reloads: %v", err)
					return
				}
			}
		}()
	}
	for i := range 200 {
		ring := append(append([]byte{}, newKey...), oldKey...)
		if i%2 == 0 {
			ring = oldKey
		}
		if err := svc.Server.Reload(root, ring); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if _, err := admin.WhoAmI(ctx); err != nil {
		t.Fatal(err)
	}
	if err := svc.Server.Reload(root, newKey); err != nil {
		t.Fatal(err)
	}
	bot, _ := client.New(svc.URL, cr.Token, nil)
	var ce *api.Error
	if _, err := bot.WhoAmI(ctx); !errors.As(err, &ce) || ce.Status != 401 {
		t.Fatalf("a token of a retired key: %v; want 401", err)
	}
}
