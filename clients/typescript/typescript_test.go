// Package typescript_test runs the tests of the TypeScript client
// (@lineage-guard/client, this directory) and its framework adapters against a
// real `lineagec serve` built from this checkout, so `go test ./...` (and so
// ./test.sh and CI) runs them. The npm packages come from the committed
// lockfile: `npm ci --prefix clients/typescript` (./test.sh does it).
package typescript_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/lineage-guard/lineage/server"
)

// need skips the test outside CI when a part it needs is missing, and fails it under CI=true.
func need(t *testing.T, ok bool, why string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: the TypeScript client's tests must run)", why)
	}
	t.Skipf("skipping the TypeScript client's tests: %s", why)
}

// TestTypeScriptClient builds lineagec, starts `serve` on a free loopback port
// over a temporary data directory with an admin and an approver from an
// --auth file, and runs `npm test` (node --test) with the service's URL, the
// tokens and the binary (for the tests that stop a service of their own) in
// the environment.
func TestTypeScriptClient(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the TypeScript tests need a build of lineagec and npm (run without -short)")
	}
	_, errNode := exec.LookPath("node")
	_, errNpm := exec.LookPath("npm")
	need(t, errNode == nil && errNpm == nil, "node and npm are not installed")
	_, errMods := os.Stat(filepath.Join("node_modules", "typescript"))
	need(t, errMods == nil, "the npm packages are not installed (npm ci --prefix clients/typescript)")

	dir := t.TempDir()
	bin := filepath.Join(dir, "lineagec")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/lineagec")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/lineagec: %v\n%s", err, out)
	}
	admin, approver := server.NewToken(), server.NewToken()
	auth, _ := json.Marshal(map[string]any{"principals": []map[string]string{
		{"name": "root", "role": "admin", "token_sha256": server.TokenSHA256(admin)},
		{"name": "alice", "role": "approver", "token_sha256": server.TokenSHA256(approver)},
	}})
	authFile := filepath.Join(dir, "auth.json")
	if err := os.WriteFile(authFile, auth, 0o600); err != nil {
		t.Fatal(err)
	}
	url := serve(t, bin, filepath.Join(dir, "data"), authFile)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "test", "--silent")
	cmd.Env = append(os.Environ(),
		"LINEAGE_TEST_SERVER="+url,
		"LINEAGE_TEST_ADMIN_TOKEN="+admin,
		"LINEAGE_TEST_APPROVER_TOKEN="+approver,
		"LINEAGE_TEST_BIN="+bin,
		"LINEAGE_SERVER=", "LINEAGE_TOKEN=",
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("npm test:\n%s", out.String())
	if err != nil {
		t.Fatalf("npm test: %v", err)
	}
}

// serve starts `lineagec serve` on a free loopback port and returns its URL
// once /health answers; the process is stopped (SIGTERM) when the test ends.
func serve(t *testing.T, bin, data, authFile string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var log bytes.Buffer
	cmd := exec.Command(bin, "serve", "--addr", addr, "--data", data, "--auth", authFile)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("lineagec serve:\n%s", log.String())
		}
	})
	url := "http://" + addr
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		if res, err := http.Get(url + "/health"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return url
			}
		}
		select {
		case err := <-done:
			t.Fatalf("lineagec serve exited: %v\n%s", err, log.String())
		default:
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("lineagec serve did not answer /health within 20 s\n%s", log.String())
		}
	}
}
