package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store/file"
	"github.com/lineage-guard/lineage/server"

	"github.com/rogpeppe/go-internal/testscript"
)

// startServe runs `lineagec serve` (this test binary under that name, see
// TestMain) on a free loopback port and returns the process, its URL, its
// stderr so far, and a wait that returns once the process ended and all its
// stderr is read.
func startServe(t *testing.T, data string, extra ...string) (*exec.Cmd, string, func() string, func() error) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "lineagec")
	if err := os.Symlink(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"serve", "--addr", "127.0.0.1:0", "--data", data}, extra...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var out strings.Builder
	var mu sync.Mutex
	urlc := make(chan string, 1)
	eof := make(chan struct{})
	wait := func() error {
		select { // Wait closes the pipe: read it to its end first
		case <-eof:
		case <-time.After(60 * time.Second):
		}
		return cmd.Wait()
	}
	go func() {
		defer close(eof)
		sc := bufio.NewScanner(stderr)
		re := regexp.MustCompile(`serving .* on (https?://\S+)`)
		for sc.Scan() {
			mu.Lock()
			out.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				urlc <- m[1]
			}
		}
	}()
	select {
	case u := <-urlc:
		return cmd, u, func() string { mu.Lock(); defer mu.Unlock(); return out.String() }, wait
	case <-time.After(30 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("serve did not start:\n%s", out.String())
	}
	return nil, "", nil, nil
}

// TestServeSIGTERM: under load, SIGTERM ends serve with status 0; every
// verdict a client received is in the log, and the log verifies.
func TestServeSIGTERM(t *testing.T) {
	data := t.TempDir()
	cmd, url, stderr, wait := startServe(t, data)
	tok, err := os.ReadFile(filepath.Join(data, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	if info, _ := os.Stat(filepath.Join(data, "admin.token")); info.Mode().Perm() != 0o600 {
		t.Errorf("admin.token mode %v", info.Mode().Perm())
	}
	if strings.Contains(stderr(), strings.TrimSpace(string(tok))) {
		t.Errorf("serve printed the admin token")
	}
	admin, _ := client.New(url, strings.TrimSpace(string(tok)), nil)
	ctx := context.Background()
	created, err := admin.CreateAgent(ctx, json.RawMessage(`{"budget": 100000, "tools": {"t": {"cost": 1}}}`), "", "")
	if err != nil {
		t.Fatal(err)
	}
	bot, _ := client.New(url, created.Token, nil)
	bot.Retries = 0
	var (
		mu      sync.Mutex
		got     = map[uint64]bool{}
		wg      sync.WaitGroup
		stopped = make(chan struct{})
	)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stopped:
					return
				default:
				}
				v, err := bot.Request(ctx, created.Agent, lineage.Request{Tool: "t"})
				if err != nil {
					return // the server went away: that request was never acknowledged
				}
				mu.Lock()
				got[v.Seq] = true
				mu.Unlock()
			}
		}()
	}
	// SIGTERM once the load is on: some verdicts answered, more in flight.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 50 {
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = wait()
	close(stopped)
	wg.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) || err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, stderr())
	}
	st, err := file.Open(data, file.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rt := runtime.Open(st, runtime.Options{})
	recs, err := rt.Records(created.Agent)
	if err != nil {
		t.Fatalf("the log does not verify after SIGTERM: %v", err)
	}
	if len(got) == 0 {
		t.Fatal("no request was answered before SIGTERM")
	}
	for seq := range got {
		if seq >= uint64(len(recs)) || recs[seq].Kind != lineage.KindAction {
			t.Errorf("verdict at seq %d was answered but is not in the log (%d records)", seq, len(recs))
		}
	}
	if !strings.Contains(stderr(), "the store is closed") {
		t.Errorf("stderr:\n%s", stderr())
	}
}

// TestBothWays runs each testdata/both/*.txtar twice: on the local store, and
// against a real `lineagec serve` handler over another data directory, with
// $LINEAGE_SERVER and an admin $LINEAGE_TOKEN named "ops". The output and
// exit status must match; [remote] and [!remote] mark the lines that differ
// by design (--by is refused remotely, the token names the approver).
func TestBothWays(t *testing.T) {
	for _, remote := range []bool{false, true} {
		name := "local"
		if remote {
			name = "remote"
		}
		t.Run(name, func(t *testing.T) {
			testscript.Run(t, testscript.Params{
				Dir:                 "testdata/both",
				RequireExplicitExec: true,
				Setup: func(env *testscript.Env) error {
					env.Setenv("LINEAGE_DATA", filepath.Join(env.WorkDir, "data"))
					if !remote {
						return nil
					}
					u, tok, stop, err := serveInProcess(filepath.Join(env.WorkDir, "srv"))
					if err != nil {
						return err
					}
					env.Defer(stop)
					env.Setenv("LINEAGE_SERVER", u)
					env.Setenv("LINEAGE_TOKEN", tok)
					return nil
				},
				Condition: func(cond string) (bool, error) {
					if cond == "remote" {
						return remote, nil
					}
					return false, fmt.Errorf("unknown condition %q", cond)
				},
				Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
					"exits":   cmdExits,
					"capture": cmdCapture,
				},
			})
		})
	}
}

// serveInProcess starts the server package over a data directory on a
// loopback port, with one admin "ops".
func serveInProcess(dir string) (string, string, func(), error) {
	st, err := file.Open(dir, file.Options{})
	if err != nil {
		return "", "", nil, err
	}
	rt := runtime.Open(st, runtime.Options{})
	tok := server.NewToken()
	srv, err := server.New(server.Config{Runtime: rt, Key: server.NewKey(),
		Principals: []server.Entry{{Name: "ops", Role: server.RoleAdmin, TokenSHA256: server.TokenSHA256(tok)}}})
	if err != nil {
		return "", "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", "", nil, err
	}
	hs := srv.HTTPServer("")
	go hs.Serve(ln)
	return "http://" + ln.Addr().String(), tok, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
		_ = st.Close()
	}, nil
}

// TestServeTLS: with --tls-cert and --tls-key the service speaks HTTPS only.
func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	pool := writeSelfSigned(t, certFile, keyFile)
	_, u, stderr, _ := startServe(t, filepath.Join(dir, "data"), "--tls-cert", certFile, "--tls-key", keyFile, "--log-format", "json", "--log-level", "debug")
	if !strings.HasPrefix(u, "https://") {
		t.Fatalf("serving on %s", u)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	c, _ := client.New(u, "", hc)
	if err := c.Health(context.Background()); err != nil {
		t.Errorf("health over TLS: %v", err)
	}
	time.Sleep(100 * time.Millisecond) // the log line follows the answer
	if !regexp.MustCompile(`(?m)^\{"time":.*"msg":"request","method":"GET","route":"/health"`).MatchString(stderr()) {
		t.Errorf("no JSON request log line:\n%s", stderr())
	}
	resp, err := http.Get(strings.Replace(u, "https://", "http://", 1) + "/health")
	if err == nil {
		if resp.StatusCode == 200 {
			t.Errorf("plain HTTP was answered 200 on a TLS port")
		}
		resp.Body.Close()
	}
}

// writeSelfSigned writes a certificate for 127.0.0.1 and its key, and returns a pool trusting it.
func writeSelfSigned(t *testing.T, certFile, keyFile string) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lineage test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}

// TestServeMemoryStoreAlone: serve's hidden --memory-store (bench serve's
// measure of what durability costs) refuses --store beside it, before it
// touches either.
func TestServeMemoryStoreAlone(t *testing.T) {
	var stdout, stderr strings.Builder
	code := run([]string{"serve", "--memory-store", "--store", "postgres://127.0.0.1:1/none", "--data", t.TempDir()}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "--memory-store and --store") {
		t.Errorf("exit %d, stderr %q: want 1 and the two flags named", code, stderr.String())
	}
}
