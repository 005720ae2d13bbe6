package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lineage-guard/lineage/api"

	"github.com/spf13/pflag"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/runtime/store/postgres/pgtest"
	"github.com/lineage-guard/lineage/schema"
	"github.com/lineage-guard/lineage/server"
)

// principalLine makes a token of name and role and returns it with its
// auth file line (lineagec token).
func principalLine(t *testing.T, name, role string) (token, line string) {
	t.Helper()
	code, out, stderr := cli("token", "--name", name, "--role", role)
	token, line, _ = strings.Cut(strings.TrimSpace(out), "\n")
	if code != exitOK || line == "" {
		t.Fatalf("token: exit %d, %q, %s", code, out, stderr)
	}
	return token, line
}

// writeAuth writes an auth file of the given lines.
func writeAuth(t *testing.T, file string, lines ...string) {
	t.Helper()
	if err := os.WriteFile(file, []byte("principals:\n"+strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// hup sends SIGHUP to serve and waits for the n-th line of its answer
// (reloaded, or reload refused).
func hup(t *testing.T, cmd *exec.Cmd, stderr func() string, n int) string {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		s := stderr()
		if strings.Count(s, "msg=reloaded")+strings.Count(s, `msg="reload refused`) >= n {
			return s
		}
	}
	t.Fatalf("serve did not answer SIGHUP %d:\n%s", n, stderr())
	return ""
}

// status is the HTTP status of err (200 for nil).
func status(err error) int {
	var ce *api.Error
	switch {
	case err == nil:
		return 200
	case errors.As(err, &ce):
		return ce.Status
	}
	return -1
}

// TestServeReloadAuth: on SIGHUP serve re-reads --auth: a new approver works
// at once, a removed one gets 401, a request the removed one had in flight
// finishes, and a file that does not validate is refused with a log line
// that says where, the previous principals staying. D334 (SIGHUP reloads
// the auth file and the key ring).
func TestServeReloadAuth(t *testing.T) {
	dir := t.TempDir()
	auth := filepath.Join(dir, "auth.yaml")
	rootTok, rootLine := principalLine(t, "root", "admin")
	aliceTok, aliceLine := principalLine(t, "alice", "approver")
	bobTok, bobLine := principalLine(t, "bob", "approver")
	writeAuth(t, auth, rootLine, aliceLine)
	cmd, u, stderr, _ := startServe(t, filepath.Join(dir, "d"), "--auth", auth)
	ctx := context.Background()
	root, alice, bob := connect(t, u, rootTok), connect(t, u, aliceTok), connect(t, u, bobTok)
	cr, err := root.CreateAgent(ctx, json.RawMessage(`{"budget": 10, "tools": {"t": {"cost": 1, "requires_approval": true}}}`), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := connect(t, u, cr.Token).Request(ctx, cr.Agent, lineage.Request{ID: "r1", Tool: "t"}); err != nil || v.Decision != lineage.Pending {
		t.Fatalf("request: %+v, %v; want pending", v, err)
	}
	if _, err := bob.WhoAmI(ctx); status(err) != 401 {
		t.Fatalf("bob before he is added: %v; want 401", err)
	}

	// alice waits for the verdict of r1: a request in flight across the reload.
	held := make(chan error, 1)
	var heldV lineage.Verdict
	go func() {
		v, err := alice.Verdict(ctx, cr.Agent, "r1", 30*time.Second)
		heldV = v
		held <- err
	}()
	time.Sleep(500 * time.Millisecond) // let alice's request pass its check

	writeAuth(t, auth, rootLine, bobLine)
	hup(t, cmd, stderr, 1)
	if p, err := bob.WhoAmI(ctx); err != nil || p.Name != "bob" {
		t.Fatalf("bob after the reload: %+v, %v; want bob", p, err)
	}
	if _, err := alice.WhoAmI(ctx); status(err) != 401 {
		t.Fatalf("alice after the reload removed her: %v; want 401", err)
	}
	if v, err := bob.Approve(ctx, cr.Agent, "r1"); err != nil || v.Decision != lineage.Allow {
		t.Fatalf("bob approves r1: %+v, %v", v, err)
	}
	select {
	case err := <-held:
		if err != nil || heldV.Decision != lineage.Allow {
			t.Fatalf("alice's request in flight during the reload: %+v, %v; want it to finish with the approval", heldV, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("alice's request in flight did not finish")
	}

	// A file that does not validate: refused, said where, the old set stays.
	if err := os.WriteFile(auth, []byte("principals:\n  - name: carol\n    role: boss\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := hup(t, cmd, stderr, 2)
	if !strings.Contains(out, `msg="reload refused: the previous principals and keys stay"`) || !strings.Contains(out, "auth.yaml:3:11") {
		t.Errorf("a bad auth file on SIGHUP: the log does not say it was refused and where:\n%s", out)
	}
	if p, err := bob.WhoAmI(ctx); err != nil || p.Name != "bob" {
		t.Errorf("bob after a refused reload: %+v, %v; want bob", p, err)
	}
	if _, err := alice.WhoAmI(ctx); status(err) != 401 {
		t.Errorf("alice after a refused reload: %v; want 401", err)
	}
	if err := root.Health(ctx); err != nil {
		t.Errorf("serve after a refused reload: %v", err)
	}
}

// TestServeKeyRing: nodes on one PostgreSQL store sharing a key file. A
// token made under the old first key still works on every node after
// rotation (a new first line, SIGHUP), and on a node started after it; new
// tokens are made under the new key; once the old key's line is removed
// (SIGHUP) its tokens get 401 everywhere. D333 (the key ring), D334 (SIGHUP
// reloads the auth file and the key ring).
func TestServeKeyRing(t *testing.T) {
	url := pgtest.URL(t)
	keys := t.TempDir()
	keyFile, authFile := filepath.Join(keys, "server.key"), filepath.Join(keys, "auth.yaml")
	oldKey, newKey := string(server.NewKey()), string(server.NewKey())
	writeKeys := func(text string) {
		t.Helper()
		if err := os.WriteFile(keyFile, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeKeys(oldKey)
	tok, line := principalLine(t, "ops", "admin")
	writeAuth(t, authFile, line)
	type node struct {
		cmd    *exec.Cmd
		u      string
		stderr func() string
	}
	start := func() node {
		cmd, u, stderr, _ := startServe(t, t.TempDir(), "--store", url, "--auth", authFile, "--server-key", keyFile)
		return node{cmd, u, stderr}
	}
	nodes := []node{start(), start()}
	ctx := context.Background()
	create := func() api.Created {
		t.Helper()
		cr, err := connect(t, nodes[0].u, tok).CreateAgent(ctx, json.RawMessage(`{"budget": 100, "tools": {"t": {"cost": 1}}}`), "", "")
		if err != nil {
			t.Fatal(err)
		}
		return cr
	}
	calls := 0
	expect := func(when string, cr api.Created, want int, on ...node) {
		t.Helper()
		for i, n := range on {
			calls++
			_, err := connect(t, n.u, cr.Token).Request(ctx, cr.Agent, lineage.Request{ID: "c" + string(rune('a'+calls)), Tool: "t"})
			if status(err) != want {
				t.Errorf("%s: node %d: %v; want %d", when, i+1, err, want)
			}
		}
	}
	old := create()
	expect("before rotation, token of the old key", old, 200, nodes...)

	writeKeys("# rotated: the new key signs\n" + newKey + oldKey)
	for i, n := range nodes {
		if out := hup(t, n.cmd, n.stderr, 1); !strings.Contains(out, "keys=2") {
			t.Fatalf("node %d: reload: %s", i+1, out)
		}
	}
	fresh := create()
	nodes = append(nodes, start()) // a node started with the ring
	expect("after rotation, token of the old key", old, 200, nodes...)
	expect("after rotation, token of the new key", fresh, 200, nodes...)

	writeKeys(newKey)
	for i, n := range nodes {
		if out := hup(t, n.cmd, n.stderr, 1+strings.Count(n.stderr(), "msg=reloaded")); !strings.Contains(out, "keys=1") {
			t.Fatalf("node %d: reload: %s", i+1, out)
		}
	}
	expect("after retiring the old key, token of the old key", old, 401, nodes...)
	expect("after retiring the old key, token of the new key", fresh, 200, nodes...)
}

// TestServeLogLevel: at info, polls of /health and /metrics leave no line
// and tokens appear nowhere in the log, not even a wrong one; at debug the
// polls are logged. D336 (health and metrics polls at debug), D337 (start
// lines at every log level).
func TestServeLogLevel(t *testing.T) {
	data := filepath.Join(t.TempDir(), "d")
	_, u, stderr, _ := startServe(t, data)
	tok, err := os.ReadFile(filepath.Join(data, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	admin := connect(t, u, strings.TrimSpace(string(tok)))
	cr, err := admin.CreateAgent(ctx, json.RawMessage(`{"budget": 10, "tools": {"t": {"cost": 1}}}`), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := connect(t, u, cr.Token).Request(ctx, cr.Agent, lineage.Request{ID: "a", Tool: "t"}); err != nil {
		t.Fatal(err)
	}
	wrong := server.NewToken()
	if _, err := connect(t, u, wrong).WhoAmI(ctx); status(err) != 401 {
		t.Fatalf("a wrong token: %v; want 401", err)
	}
	for range 5 {
		if err := admin.Health(ctx); err != nil {
			t.Fatal(err)
		}
		resp, err := http.Get(u + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if !waitFor(t, stderr, "route=/v1/whoami") {
		t.Fatalf("no request line for the wrong token's call:\n%s", stderr())
	}
	out := stderr()
	for _, route := range []string{"route=/health", "route=/metrics"} {
		if strings.Contains(out, route) {
			t.Errorf("at info the log has a line for %s:\n%s", route, out)
		}
	}
	for what, secret := range map[string]string{"the admin token": strings.TrimSpace(string(tok)), "the agent token": cr.Token, "a wrong token": wrong} {
		if strings.Contains(out, secret) || strings.Contains(out, secret[4:]) {
			t.Errorf("the log holds %s:\n%s", what, out)
		}
	}

	_, u2, stderr2, _ := startServe(t, filepath.Join(t.TempDir(), "d"), "--log-level", "debug")
	if err := connect(t, u2, "x").Health(ctx); err != nil {
		t.Fatal(err)
	}
	if !waitFor(t, stderr2, "level=DEBUG msg=request method=GET route=/health") {
		t.Errorf("at debug the log has no line for /health:\n%s", stderr2())
	}
	if _, err := connect(t, u2, wrong).WhoAmI(ctx); status(err) != 401 {
		t.Fatalf("a wrong token: %v; want 401", err)
	}
	if waitFor(t, stderr2, "route=/v1/whoami") && strings.Contains(stderr2(), wrong[4:]) {
		t.Errorf("at debug the log holds a wrong token:\n%s", stderr2())
	}
	// The start and stop lines are no log records: serve prints them at
	// every level (startServe waits for "serving … on"), D337 (start lines
	// at every log level).
	startServe(t, filepath.Join(t.TempDir(), "d"), "--log-level", "error")
	var out3, err3 strings.Builder
	if code := run([]string{"serve", "--data", t.TempDir(), "--log-level", "loud"}, &out3, &err3); code == 0 || !strings.Contains(err3.String(), `unknown --log-level "loud"`) {
		t.Errorf("--log-level loud: exit %d, %s", code, err3.String())
	}
}

// TestServeConfigFile: serve --config takes its flags from a YAML (or
// JSON) file, paths relative to the file; the command line wins; unknown
// keys and bad values are refused at file:line:col before anything starts.
// D330 (a config file holds serve's flags), D332 (config paths are relative
// to the config file).
func TestServeConfigFile(t *testing.T) {
	dir := t.TempDir()
	tok, line := principalLine(t, "root", "admin")
	writeAuth(t, filepath.Join(dir, "auth.yaml"), line)
	conf := filepath.Join(dir, "serve.yaml")
	// addr names a port serve may not take: the command line's must win.
	text := "$schema: ../schema/serve.schema.json\naddr: 127.0.0.1:1\nauth: auth.yaml\nlog-level: debug\nmax-agents: 5\nagent-idle: 1m\nagent-rps: 2.5\n"
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	_, u, stderr, _ := startServe(t, filepath.Join(dir, "d"), "--config", conf)
	if strings.HasSuffix(u, ":1") {
		t.Fatalf("serve listens on %s: the config's addr won over --addr", u)
	}
	ctx := context.Background()
	if p, err := connect(t, u, tok).WhoAmI(ctx); err != nil || p.Name != "root" {
		t.Fatalf("the admin of the config's auth file: %+v, %v", p, err)
	}
	if err := connect(t, u, "x").Health(ctx); err != nil {
		t.Fatal(err)
	}
	if !waitFor(t, stderr, "level=DEBUG msg=request method=GET route=/health") {
		t.Errorf("log-level: debug of the config file was not applied:\n%s", stderr())
	}

	for _, c := range []struct{ name, text, want string }{
		{"serve.yaml", "addr: 127.0.0.1:0\nadr: x\n", "serve.yaml:2:1: /adr: "},
		{"serve.yaml", "max-agents: lots\n", "serve.yaml:1:13: /max-agents: "},
		{"serve.yaml", "agent-idle: 10 minutes\n", "serve.yaml:1:13: /agent-idle: "},
		{"serve.json", "{\n  \"addr\": \"127.0.0.1:0\",\n  \"config\": \"x\"\n}\n", "serve.json:3:3: /config: "},
		{"serve.json", "{\"log-level\": \"loud\"}", "serve.json:1:15: /log-level: "},
	} {
		f := filepath.Join(t.TempDir(), c.name)
		if err := os.WriteFile(f, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		data := filepath.Join(t.TempDir(), "d")
		var out, errb strings.Builder
		code := run([]string{"serve", "--data", data, "--config", f}, &out, &errb)
		if code == 0 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%q: exit %d, stderr:\n%s\nwant %q", c.text, code, errb.String(), c.want)
		}
		if _, err := os.Stat(data); err == nil {
			t.Errorf("%q: a refused config made the data directory", c.text)
		}
	}
}

// TestServeConfigSchemaHasEveryFlag: schema/serve.schema.json names every
// flag of serve (but --config and --help) and nothing else.
func TestServeConfigSchemaHasEveryFlag(t *testing.T) {
	b, err := schema.Get("serve")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	root := newRootCmd(&strings.Builder{}, &strings.Builder{})
	serve, _, err := root.Find([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string]bool{"data": true, "$schema": true}
	serve.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
		flags[f.Name] = true
		if _, ok := doc.Properties[f.Name]; !ok && !serveConfigNotKeys[f.Name] {
			t.Errorf("serve --%s is not in schema/serve.schema.json", f.Name)
		}
	})
	for name := range doc.Properties {
		if !flags[name] {
			t.Errorf("schema/serve.schema.json has %q, which is no flag of serve", name)
		}
	}
}

// TestServeReloadTLS: on SIGHUP serve reads its TLS certificate again, so a
// renewed certificate needs no restart; a pair that does not load is
// refused and the previous certificate stays. D338 (SIGHUP reloads the TLS
// certificate).
func TestServeReloadTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	oldPool := writeSelfSigned(t, certFile, keyFile)
	cmd, u, stderr, _ := startServe(t, filepath.Join(dir, "data"), "--tls-cert", certFile, "--tls-key", keyFile)
	health := func(pool *x509.CertPool) error {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}
		c, _ := client.New(u, "", hc)
		c.Retries = 0
		return c.Health(context.Background())
	}
	if err := health(oldPool); err != nil {
		t.Fatalf("before renewal: %v", err)
	}
	newPool := writeSelfSigned(t, certFile, keyFile)
	if out := hup(t, cmd, stderr, 1); !strings.Contains(out, "msg=reloaded") {
		t.Fatalf("reload: %s", out)
	}
	if err := health(newPool); err != nil {
		t.Errorf("after renewal, trusting the new certificate: %v", err)
	}
	if err := health(oldPool); err == nil {
		t.Errorf("after renewal, serve still shows the old certificate")
	}
	if err := os.WriteFile(certFile, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := hup(t, cmd, stderr, 2); !strings.Contains(out, `msg="reload refused`) || !strings.Contains(out, "--tls-cert "+certFile) {
		t.Errorf("a bad certificate on SIGHUP was not refused in the log:\n%s", out)
	}
	if err := health(newPool); err != nil {
		t.Errorf("after a refused reload, the previous certificate: %v", err)
	}
}
