package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lineage-guard/lineage/server/servertest"
)

// The generators' pins (docs/service.md, "A client in another language";
// D293 (generators pinned, run apart from the module)). Redocly's CLI is
// pinned in testdata/npm/package-lock.json.
const (
	oapiCodegen = "github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2"
	genTimeout  = 5 * time.Minute // one step: a fresh machine downloads modules
)

// needed fails the test under CI=true and skips it otherwise: a part the
// test needs is missing.
func needed(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// servedDocument starts a real service and returns the document it serves.
func servedDocument(t *testing.T) (*servertest.Service, []byte) {
	t.Helper()
	svc := servertest.Start(t)
	res, err := http.Get(svc.URL + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	doc, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/openapi.json: %d %v", res.StatusCode, err)
	}
	return svc, doc
}

// copyFiles copies files of testdata/from into dir.
func copyFiles(t *testing.T, from, dir string, names ...string) {
	t.Helper()
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join("testdata", from, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

type redoclyReport struct {
	Totals struct {
		Errors   int `json:"errors"`
		Warnings int `json:"warnings"`
		Ignored  int `json:"ignored"`
	} `json:"totals"`
	Version  string `json:"version"`
	Problems []struct {
		RuleID   string `json:"ruleId"`
		Severity string `json:"severity"`
		Message  string `json:"message"`
		Location []struct {
			Pointer string `json:"pointer"`
		} `json:"location"`
	} `json:"problems"`
}

// redoclyLint lints doc as openapi.json under testdata/redocly's
// configuration and ignore file.
func redoclyLint(t *testing.T, bin string, doc []byte) redoclyReport {
	t.Helper()
	dir := t.TempDir()
	copyFiles(t, "redocly", dir, "redocly.yaml", ".redocly.lint-ignore.yaml")
	if err := os.WriteFile(filepath.Join(dir, "openapi.json"), doc, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "lint", "--config", "redocly.yaml", "--format", "json", "openapi.json")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "NO_COLOR=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var rep redoclyReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("redocly lint: %v (exit: %v)\nstdout: %s\nstderr: %s", err, runErr, stdout.Bytes(), stderr.Bytes())
	}
	if runErr != nil && rep.Totals.Errors == 0 {
		t.Fatalf("redocly lint: %v\nstderr: %s", runErr, stderr.Bytes())
	}
	return rep
}

// TestOpenAPIRedoclyLint lints the served document with Redocly's CLI under
// its recommended rules: no error and no warning; the ignore file holds the
// only exceptions (D292 (no 4xx for a call that has none)). A copy without
// an operationId must draw a warning, so the lint is seen to lint.
func TestOpenAPIRedoclyLint(t *testing.T) {
	bin, err := filepath.Abs(filepath.Join("testdata", "npm", "node_modules", ".bin", "redocly"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		needed(t, "redocly is not installed (%v): run npm ci --prefix server/testdata/npm --no-audit --no-fund", err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		needed(t, "node is not installed")
	}
	_, doc := servedDocument(t)

	rep := redoclyLint(t, bin, doc)
	t.Logf("redocly %s lint, recommended: %d errors, %d warnings, %d ignored", rep.Version,
		rep.Totals.Errors, rep.Totals.Warnings, rep.Totals.Ignored)
	for _, p := range rep.Problems {
		where := ""
		if len(p.Location) > 0 {
			where = p.Location[0].Pointer
		}
		t.Errorf("%s %s at %s: %s", p.Severity, p.RuleID, where, p.Message)
	}
	if rep.Totals.Errors+rep.Totals.Warnings != 0 || len(rep.Problems) != 0 {
		t.Errorf("redocly lint: %d errors, %d warnings; want none", rep.Totals.Errors, rep.Totals.Warnings)
	}

	broken := bytes.Replace(doc, []byte(`"operationId": "whoami",`), nil, 1)
	if bytes.Equal(broken, doc) {
		t.Fatal(`no "operationId": "whoami" in the document`)
	}
	rep = redoclyLint(t, bin, broken)
	if rep.Totals.Warnings != 1 || len(rep.Problems) != 1 || rep.Problems[0].RuleID != "operation-operationId" {
		t.Errorf("a document without whoami's operationId: %+v, want one operation-operationId warning", rep)
	}
}

// TestOpenAPIGoClient generates a Go client from the served document with
// oapi-codegen, builds a program over it in a module of its own
// (testdata/goclient) and runs it against the real service: one decision
// allowed, one denied, one typed error. A document that breaks generated
// clients fails here.
func TestOpenAPIGoClient(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		needed(t, "the go command is not on PATH: %v", err)
	}
	svc, doc := servedDocument(t)
	dir := t.TempDir()
	copyFiles(t, "goclient", dir, "go.mod", "go.sum", "main.go", "oapi-codegen.yaml")
	if err := os.WriteFile(filepath.Join(dir, "openapi.json"), doc, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "lineageapi"), 0o755); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=-buildvcs=false")
	run := func(name string, args ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), genTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir, cmd.Env = dir, env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		err := cmd.Run()
		what := filepath.Base(name) // the program's arguments hold a token: not logged
		if name == goBin {
			what += " " + strings.Join(args, " ")
		}
		t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond))
		if err != nil {
			msg := fmt.Sprintf("%s: %v\n%s%s", what, err, stdout.Bytes(), stderr.Bytes())
			if e := stderr.String(); strings.Contains(e, "dial tcp") || strings.Contains(e, "lookup ") || strings.Contains(e, "GOPROXY=off") {
				needed(t, "the Go module proxy is unreachable: %s", msg)
			}
			t.Fatal(msg)
		}
		return stdout.Bytes()
	}
	run(goBin, "run", oapiCodegen, "-config", "oapi-codegen.yaml", "openapi.json")
	gen, err := os.ReadFile(filepath.Join(dir, "lineageapi", "client.gen.go"))
	if err != nil {
		t.Fatal(err)
	}

	// Every operation is a method named after its operationId.
	var ops struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(doc, &ops); err != nil {
		t.Fatal(err)
	}
	var methods []string
	for _, m := range regexp.MustCompile(`(?m)^func \(c \*Client\) ([A-Z]\w*)\(`).FindAllSubmatch(gen, -1) {
		methods = append(methods, string(m[1]))
	}
	t.Logf("generated %d lines; Client methods: %s", bytes.Count(gen, []byte("\n")), strings.Join(methods, " "))
	for _, byPath := range ops.Paths {
		for method, op := range byPath {
			if op.OperationID == "" {
				t.Errorf("%s: no operationId", method)
				continue
			}
			want := strings.ToUpper(op.OperationID[:1]) + op.OperationID[1:]
			if !slices.Contains(methods, want) {
				t.Errorf("operationId %q: no method %s in the generated client", op.OperationID, want)
			}
		}
	}

	run(goBin, "build", "-o", "lineageclient", ".")
	out := run(filepath.Join(dir, "lineageclient"), svc.URL, svc.AdminToken, testPolicy)
	var got struct {
		Agent   string
		Allowed struct{ Decision, Reason string }
		Denied  struct{ Decision, Reason string }
		Unknown struct{ Code, Message string }
		Status  map[string]int
		Whoami  struct{ Role, Agent string }
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("the program's output %q: %v", out, err)
	}
	if got.Allowed.Decision != "allow" {
		t.Errorf("pay 50 through the generated client: %+v, want allow", got.Allowed)
	}
	if got.Denied.Decision != "deny" || got.Denied.Reason != "too_much" {
		t.Errorf("pay 500 through the generated client: %+v, want deny too_much", got.Denied)
	}
	if got.Unknown.Code != "unknown_agent" || got.Status["getAgent unknown"] != http.StatusNotFound {
		t.Errorf("an unknown agent through the generated client: %+v %v, want 404 unknown_agent", got.Unknown, got.Status)
	}
	if got.Whoami.Role != "agent" || got.Whoami.Agent != got.Agent {
		t.Errorf("whoami with the agent's token: %+v", got.Whoami)
	}
	// The decisions are in the agent's log, as the service recorded them.
	st, err := svc.Runtime.State(context.Background(), got.Agent)
	if err != nil {
		t.Fatal(err)
	}
	if st.Seq != 3 {
		t.Errorf("the agent's log ends at seq %d, want 3 (genesis, policy, two decisions)", st.Seq)
	}
}
