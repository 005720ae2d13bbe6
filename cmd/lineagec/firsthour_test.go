package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitFor polls serve's stderr until it contains want, for up to 10 s.
func waitFor(t *testing.T, stderr func() string, want string) bool {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if strings.Contains(stderr(), want) {
			return true
		}
	}
	return false
}

// TestServePlainHTTPBeyondLoopback: serve on a wildcard address without TLS
// warns on stderr at start; on loopback it does not. D308 (plain HTTP
// beyond loopback is said at start).
func TestServePlainHTTPBeyondLoopback(t *testing.T) {
	_, _, stderr, _ := startServe(t, filepath.Join(t.TempDir(), "d"), "--addr", "0.0.0.0:0")
	if !waitFor(t, stderr, "plain HTTP: tokens and approvals cross the network in clear text; give --tls-cert and --tls-key") {
		t.Errorf("serve --addr 0.0.0.0:0 said no warning:\n%s", stderr())
	}
	_, _, stderr, _ = startServe(t, filepath.Join(t.TempDir(), "d"))
	time.Sleep(200 * time.Millisecond)
	if strings.Contains(stderr(), "warning") {
		t.Errorf("serve on loopback warned:\n%s", stderr())
	}
}

// TestServeAuthFromTokenLine: the line `lineagec token` prints, pasted as it
// is under "principals:", is an auth file serve takes; and serve says at
// start that the data directory's admin token is not used under --auth.
// D305 (the token's line pastes as a list item), D307 (under --auth,
// admin.token is not a key).
func TestServeAuthFromTokenLine(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	if code := run([]string{"token", "--name", "bob", "--role", "admin"}, &out, &errb); code != 0 {
		t.Fatalf("token: exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	auth := filepath.Join(dir, "auth.yaml")
	if err := os.WriteFile(auth, []byte("principals:\n"+lines[1]+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "d")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "admin.token"), []byte("lgt_old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, stderr, _ := startServe(t, data, "--auth", auth)
	if !waitFor(t, stderr, "admin.token is not used") {
		t.Errorf("serve --auth said nothing of admin.token:\n%s", stderr())
	}
}

// TestLockHeldByServe: with serve running on the data directory, a local
// command fails at once (not after --lock-timeout) and says how to reach
// the data through serve. D306 (a directory held by serve: say --server, do
// not wait).
func TestLockHeldByServe(t *testing.T) {
	data := filepath.Join(t.TempDir(), "d")
	addr := freeAddr(t)
	startServe(t, data, "--addr", addr)
	var out, errb bytes.Buffer
	start := time.Now()
	code := run([]string{"--data", data, "agent", "list"}, &out, &errb)
	if took := time.Since(start); code != 1 || took > 3*time.Second {
		t.Errorf("agent list: exit %d after %v, want 1 at once", code, took)
	}
	for _, want := range []string{"--server http://" + addr, "$LINEAGE_TOKEN", "admin.token"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("agent list: stderr lacks %q:\n%s", want, errb.String())
		}
	}
}
