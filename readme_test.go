package lineage_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/conformance"
	"github.com/lineage-guard/lineage/schema"
)

// The README is read by people who paste from it. These tests run what it
// shows: the Quick start's commands in order (each comment "exit N: …" is a
// claim about the exit status and the printed JSON), and the Go API program
// in a module of its own.

// fence is one fenced code block of a Markdown file.
type fence struct {
	lang, text string
	line       int // of the opening fence
}

// fences returns the fenced blocks of README.md's section whose heading is title.
func fences(t *testing.T, title string) []fence {
	t.Helper()
	return fencesOf(t, "README.md", title)
}

// fencesOf returns the fenced blocks of a Markdown file's section whose
// heading ("## title") is title, or of the whole file for "".
func fencesOf(t *testing.T, file, title string) []fence {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []fence
	in, cur := title == "", (*fence)(nil)
	for i, l := range strings.Split(string(b), "\n") {
		switch {
		case title != "" && cur == nil && strings.HasPrefix(l, "## "):
			in = strings.TrimPrefix(l, "## ") == title
		case !in:
		case cur == nil && strings.HasPrefix(l, "```"):
			cur = &fence{lang: strings.TrimPrefix(l, "```"), line: i + 1}
		case cur != nil && l == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += l + "\n"
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no code blocks under %q", file, title)
	}
	return out
}

// buildLineagec builds the command into dir/bin/lineagec.
func buildLineagec(t *testing.T, dir string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "bin", "lineagec"), "./cmd/lineagec")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
}

// claimRE is a Quick start comment that says what a command does.
var claimRE = regexp.MustCompile(`\s+#\s+exit (\d+):\s*(.*)$`)

// TestReadmeQuickStart runs the Quick start in a fresh directory, in the
// README's order: the schema the policy's first line names must exist when
// the policy is written, every command must exit as its comment says (0
// when it says nothing) and print what its comment claims.
func TestReadmeQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds lineagec")
	}
	dir := t.TempDir()
	var script strings.Builder
	type check struct {
		line, cmd string
		exit      int
		claims    []string
	}
	var checks []check
	policyWritten := false
	for _, f := range fences(t, "Quick start: the CLI on a local store") {
		switch f.lang {
		case "yaml":
			// Run what came before, then check the schema the first line names.
			runScript(t, dir, script.String())
			script.Reset()
			m := regexp.MustCompile(`\$schema=(\S+)`).FindStringSubmatch(strings.SplitN(f.text, "\n", 2)[0])
			if m == nil {
				t.Fatalf("README.md:%d: the policy's first line names no $schema", f.line+1)
			}
			got, err := os.ReadFile(filepath.Join(dir, m[1]))
			if err != nil {
				t.Fatalf("README.md:%d: the policy names %s, which the Quick start has not written yet: %v", f.line+1, m[1], err)
			}
			if want, _ := schema.Get("policy"); !bytes.Equal(got, want) {
				t.Errorf("%s is not the policy schema", m[1])
			}
			if err := os.WriteFile(filepath.Join(dir, "invoice.yaml"), []byte(f.text), 0o644); err != nil {
				t.Fatal(err)
			}
			policyWritten = true
		case "sh":
			for i, l := range strings.Split(strings.TrimSpace(f.text), "\n") {
				where := fmt.Sprintf("README.md:%d", f.line+1+i)
				if l == "go build -o bin/lineagec ./cmd/lineagec" {
					buildLineagec(t, dir)
					continue
				}
				c := check{line: where, cmd: l}
				if m := claimRE.FindStringSubmatch(l); m != nil {
					c.cmd = strings.TrimSpace(l[:len(l)-len(m[0])])
					c.exit, _ = strconv.Atoi(m[1])
					c.claims = strings.Split(m[2], ", ")
				} else if k := strings.Index(l, "  #"); k >= 0 {
					c.cmd = strings.TrimSpace(l[:k])
				}
				n := len(checks)
				fmt.Fprintf(&script, "{ %s\n} >out.%d 2>err.%d; echo $? >rc.%d\n", c.cmd, n, n, n)
				checks = append(checks, c)
			}
		}
	}
	if !policyWritten {
		t.Fatal("README.md: the Quick start shows no policy")
	}
	runScript(t, dir, script.String())
	approved := ""
	for n, c := range checks {
		read := func(name string) string {
			b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%s.%d", name, n)))
			if err != nil {
				t.Fatalf("%s: %v", c.line, err)
			}
			return strings.TrimSpace(string(b))
		}
		out, stderr := read("out"), read("err")
		if rc, _ := strconv.Atoi(read("rc")); rc != c.exit {
			t.Errorf("%s: %s\nexit %d, the README says %d\nstdout: %s\nstderr: %s", c.line, c.cmd, rc, c.exit, out, stderr)
			continue
		}
		if len(c.claims) == 0 {
			continue
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Errorf("%s: %s\nprinted %q, not one JSON object: %v", c.line, c.cmd, out, err)
			continue
		}
		for _, claim := range c.claims {
			if err := checkClaim(v, claim); err != nil {
				t.Errorf("%s: %s\nthe comment says %q: %v\nprinted %s", c.line, c.cmd, claim, err, out)
			}
		}
		if strings.Contains(c.cmd, " approve ") {
			approved = out
		}
	}
	// The verdict the README shows after the commands is what approve printed.
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	shown := ""
	if m := regexp.MustCompile(`(?m)^    (\{"decision".*)$`).FindSubmatch(readme); m != nil {
		shown = string(m[1])
	}
	if shown != approved {
		t.Errorf("the README shows the approval's verdict as\n%s\napprove printed\n%s", shown, approved)
	}
}

// checkClaim checks one claim of a Quick start comment against the JSON the
// command printed: "allow", "deny" or "pending" (the decision), "moderate
// scar" (the scar's severity), "cost N", "remaining N", "scar_score N", or a
// bare reason such as "unlisted_tool". Anything else is an error, so that a
// comment cannot claim what is not checked.
func checkClaim(v map[string]any, claim string) error {
	field, want := "", ""
	switch f := strings.Fields(claim); {
	case len(f) == 1 && (f[0] == "allow" || f[0] == "deny" || f[0] == "pending"):
		field, want = "decision", f[0]
	case len(f) == 1 && regexp.MustCompile(`^[a-z][a-z0-9_]*$`).MatchString(f[0]):
		field, want = "reason", f[0]
	case len(f) == 2 && f[1] == "scar":
		s, _ := v["scar"].(map[string]any)
		if got := fmt.Sprint(s["severity"]); got != f[0] {
			return fmt.Errorf("scar severity is %s", got)
		}
		return nil
	case len(f) == 2 && (f[0] == "cost" || f[0] == "remaining" || f[0] == "scar_score"):
		field, want = f[0], f[1]
	default:
		return fmt.Errorf("not a claim this test knows how to check")
	}
	if got := fmt.Sprint(v[field]); got != want {
		return fmt.Errorf("%s is %s", field, got)
	}
	return nil
}

// runScript runs a bash script in dir (data in dir/.lineage, as the README's
// reader has it).
func runScript(t *testing.T, dir, script string) {
	t.Helper()
	if script == "" {
		return
	}
	path := filepath.Join(dir, fmt.Sprintf("step%d.sh", len(script)))
	if err := os.WriteFile(path, []byte("set +e\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", path)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LINEAGE_DATA=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
}

// TestReadmeGoProgram builds, vets and runs the Go API program exactly as
// the README shows it, in a module of its own that requires this one
// through a replace directive, and checks each "fmt.Println(…) // OUTPUT"
// comment against what it printed.
func TestReadmeGoProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module")
	}
	var src string
	for _, f := range fences(t, "Go API") {
		if f.lang == "go" {
			src = f.text
			break
		}
	}
	if src == "" {
		t.Fatal("README.md: no Go block under Go API")
	}
	if !strings.HasPrefix(src, "package ") {
		src = "package main\n\n" + src
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	goMod := fmt.Sprintf("module example.com/readme\n\ngo 1.26\n\nrequire github.com/lineage-guard/lineage v0.0.0\n\nreplace github.com/lineage-guard/lineage => %s\n", root)
	sum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"go.mod": []byte(goMod), "go.sum": sum, "main.go": []byte(src)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The module graph of this module, loaded once with the proxy the test
	// runs with: on a fresh module cache it fetches the go.mod files the graph
	// names (unpruned modules such as jcs name testify's), which a build
	// from the cache alone then finds. Nothing beyond this module's graph.
	if out, err := exec.Command("go", "list", "-m", "all").CombinedOutput(); err != nil {
		t.Fatalf("go list -m all: %v\n%s", err, out)
	}
	goCmd := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		// Everything comes from the module cache: the program needs nothing
		// that this module does not.
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "LINEAGE_DATA=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s\n(the program, as main.go:)\n%s", strings.Join(args, " "), err, out, numbered(src))
		}
		return string(out)
	}
	goCmd("build", "-o", "readme", ".")
	goCmd("vet", ".")
	if gofmt, err := exec.Command("gofmt", "-l", filepath.Join(dir, "main.go")).Output(); err != nil || len(gofmt) > 0 {
		t.Errorf("the README's Go program is not gofmt-clean (%v)", err)
	}
	cmd := exec.Command(filepath.Join(dir, "readme"))
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("running the program: %v\n%s", err, out)
	}
	var want []string
	for _, m := range regexp.MustCompile(`(?m)fmt\.Println\(.*\) // ([^:\n]*)`).FindAllStringSubmatch(src, -1) {
		want = append(want, strings.TrimSpace(m[1]))
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the program printed\n%s\nits comments say\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func numbered(src string) string {
	var b strings.Builder
	for i, l := range strings.Split(src, "\n") {
		fmt.Fprintf(&b, "%3d  %s\n", i+1, l)
	}
	return b.String()
}

// serviceClaimRE is a comment of the service Quick start: "# → allow, cost 0"
// (claims about the JSON a curl line prints, as checkClaim reads them) or
// "# prints: a, b" (text the line's output must contain).
var serviceClaimRE = regexp.MustCompile(`\s+#\s+(→|prints:)\s*(.*)$`)

// TestReadmeService runs the service Quick start as written, in a fresh
// directory: `bin/lineagec serve &` with no flags but the port (a free one
// instead of 8181, in every line and in agent.py), the curl lines, the Python
// agent loop (if python3 is here), and `kill %1`; then serve must have exited
// 0 and the agent's log must verify with every decision in it.
func TestReadmeService(t *testing.T) {
	if testing.Short() {
		t.Skip("builds lineagec and runs a server")
	}
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("the service Quick start needs %s, and CI=true: it may not skip: %v", tool, err)
			}
			t.Skipf("the service Quick start needs %s: %v", tool, err)
		}
	}
	_, pyErr := exec.LookPath("python3")
	if pyErr != nil && os.Getenv("CI") == "true" {
		t.Fatalf("the README's Python agent loop needs python3, and CI=true: it may not be left out: %v", pyErr)
	}
	dir := t.TempDir()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	local := func(s string) string { return strings.ReplaceAll(s, "127.0.0.1:8181", addr) }

	type check struct {
		line, cmd, kind string
		claims          []string
	}
	var checks []check
	var script strings.Builder
	python := false
	for _, f := range fences(t, "Quick start: the service") {
		switch f.lang {
		case "python":
			if err := os.WriteFile(filepath.Join(dir, "agent.py"), []byte(local(f.text)), 0o644); err != nil {
				t.Fatal(err)
			}
			// The loop imports the Python client from clients/python, as in the repository.
			if err := os.Symlink(filepath.Join(wd, "clients"), filepath.Join(dir, "clients")); err != nil {
				t.Fatal(err)
			}
			python = true
		case "sh":
			for i, l := range strings.Split(strings.TrimSpace(f.text), "\n") {
				where := fmt.Sprintf("README.md:%d", f.line+1+i)
				if l == "go build -o bin/lineagec ./cmd/lineagec" {
					buildLineagec(t, dir)
					continue
				}
				c := check{line: where, cmd: l}
				if m := serviceClaimRE.FindStringSubmatch(l); m != nil {
					c.cmd, c.kind = strings.TrimSpace(l[:len(l)-len(m[0])]), m[1]
					c.claims = strings.Split(m[2], ", ")
				} else if k := strings.Index(l, "  #"); k >= 0 {
					c.cmd = strings.TrimSpace(l[:k])
				}
				if strings.Contains(c.cmd, "python3") && pyErr != nil {
					t.Logf("%s: no python3 here, not run: %s", where, c.cmd)
					continue
				}
				if c.cmd == "bin/lineagec serve &" {
					c.cmd = "bin/lineagec serve --addr " + addr + " &"
				}
				n := len(checks)
				fmt.Fprintf(&script, "{ %s\n} >out.%d 2>err.%d; echo $? >rc.%d\n", local(c.cmd), n, n, n)
				checks = append(checks, c)
			}
		}
	}
	if !python || len(checks) < 8 {
		t.Fatalf("README.md: the service Quick start has %d shell lines and python %v", len(checks), python)
	}
	// After the README's own lines: serve's exit status, and the log verified.
	script.WriteString("wait %1; echo $? >serve.rc\nbin/lineagec verify \"$AGENT\" >verify.out 2>&1\n")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", "set +e\n"+script.String())
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LINEAGE_DATA=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	for n, c := range checks {
		out, stderr := read(fmt.Sprintf("out.%d", n)), read(fmt.Sprintf("err.%d", n))
		if rc := read(fmt.Sprintf("rc.%d", n)); rc != "0" {
			t.Errorf("%s: %s\nexit %s\nstdout: %s\nstderr: %s", c.line, c.cmd, rc, out, stderr)
			continue
		}
		switch c.kind {
		case "→":
			var v map[string]any
			if err := json.Unmarshal([]byte(out), &v); err != nil {
				t.Errorf("%s: %s\nprinted %q, not one JSON object: %v", c.line, c.cmd, out, err)
				continue
			}
			for _, claim := range c.claims {
				if err := checkClaim(v, claim); err != nil {
					t.Errorf("%s: %s\nthe comment says %q: %v\nprinted %s", c.line, c.cmd, claim, err, out)
				}
			}
		case "prints:":
			for _, claim := range c.claims {
				if !strings.Contains(out, claim) {
					t.Errorf("%s: %s\nthe comment says it prints %q; it printed\n%s\nstderr: %s", c.line, c.cmd, claim, out, stderr)
				}
			}
		}
	}
	if rc := read("serve.rc"); rc != "0" {
		t.Errorf("serve exited %s after kill %%1", rc)
	}
	// What the Quick start writes beside the user's files must hold no
	// secret: a token belongs in the data directory, which git ignores.
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	ours := regexp.MustCompile(`^((out|err|rc)\.\d+|serve\.rc|verify\.out)$`) // this test's captures
	for _, ent := range ents {
		if ent.IsDir() || ours.MatchString(ent.Name()) {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(dir, ent.Name())); err == nil && bytes.Contains(b, []byte("lga_")) {
			t.Errorf("the service Quick start leaves an agent token in %s, outside the data directory (git would not ignore it)", ent.Name())
		}
	}
	want := "ok: 5 records"
	if pyErr == nil {
		want = "ok: 7 records"
	}
	if got := read("verify.out"); !strings.HasPrefix(got, want) {
		t.Errorf("lineagec verify of the agent: %s, want %s", got, want)
	}
}

// TestWalkthrough runs walkthrough.sh (the README's main job) to its end. Its
// first line must say that it is building before the build, which on a cold
// cache runs for a minute or more without a word.
func TestWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("builds lineagec and runs the walkthrough")
	}
	cmd := exec.Command("bash", "walkthrough.sh")
	cmd.Env = append(os.Environ(), "LINEAGE_DATA=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("walkthrough.sh: %v\n%s", err, out)
	}
	lines := strings.Split(string(out), "\n")
	if !strings.Contains(lines[0], "building") || !strings.Contains(lines[0], "cold cache") {
		t.Errorf("walkthrough.sh starts with %q; want it to say it is building, and may take long on a cold cache", lines[0])
	}
	if !strings.HasSuffix(strings.TrimSpace(string(out)), "walkthrough: ok") {
		t.Errorf("walkthrough.sh did not end with \"walkthrough: ok\":\n%s", out)
	}
}

// TestDocsLinks: every relative link in the README, docs/ and examples/README.md
// names a file of the repository, and every #anchor a heading of that file
// (as GitHub spells heading anchors).
func TestDocsLinks(t *testing.T) {
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "README.md", "examples/README.md")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(stripCode(string(b)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: link %s: %v", page, target, err)
				continue
			}
			if anchor != "" && !slices.Contains(anchors(t, path), anchor) {
				t.Errorf("%s: link %s: %s has no heading with anchor #%s", page, target, path, anchor)
			}
		}
	}
}

// stripCode drops fenced code blocks and inline code, where ](…) is not a link.
func stripCode(s string) string {
	s = regexp.MustCompile("(?s)```.*?```").ReplaceAllString(s, "")
	return regexp.MustCompile("`[^`\n]*`").ReplaceAllString(s, "")
}

// anchors lists the heading anchors of a Markdown file: the heading's text in
// lower case, without punctuation, spaces turned into hyphens.
func anchors(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	drop := regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	for _, l := range strings.Split(stripCode(string(b)), "\n") {
		if h := strings.TrimLeft(l, "#"); h != l && strings.HasPrefix(h, " ") {
			out = append(out, strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(strings.TrimSpace(h)), ""), " ", "-"))
		}
	}
	return out
}

// TestDocsCaseExample runs the case file that docs/cases.md shows through the
// conformance runner: every case of it must pass.
func TestDocsCaseExample(t *testing.T) {
	dir := t.TempDir()
	n := 0
	for _, f := range fencesOf(t, "docs/cases.md", "") {
		if f.lang != "yaml" || !strings.Contains(f.text, "\ncases:") {
			continue
		}
		n++
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("example%d.yaml", n)), []byte(f.text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if n == 0 {
		t.Fatal("docs/cases.md shows no case file")
	}
	rep, err := conformance.RunPaths(context.Background(), []string{dir})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		if r.Status != "pass" {
			t.Errorf("docs/cases.md: %s: %s\n%s", r.Name, r.Status, strings.Join(r.Failures, "\n"))
		}
	}
	if !rep.OK() {
		t.Errorf("docs/cases.md example: %d passed, %d failed", rep.Passed, rep.Failed)
	}
}

// TestDocsPolicyExamples: every policy the reference pages show (a YAML
// block with a budget) compiles.
func TestDocsPolicyExamples(t *testing.T) {
	n := 0
	for _, page := range []string{"docs/policy.md", "docs/extensions.md"} {
		for _, f := range fencesOf(t, page, "") {
			if f.lang != "yaml" || !strings.Contains(f.text, "budget:") {
				continue
			}
			n++
			if _, err := compiler.Compile(fmt.Sprintf("%s:%d", page, f.line), []byte(f.text)); err != nil {
				t.Errorf("%s:%d: the example policy does not compile:\n%v", page, f.line, err)
			}
		}
	}
	if n < 2 {
		t.Errorf("found %d example policies, want the CEL and the extension examples", n)
	}
}

// TestReadmeInstallsLineagec: the README and docs/mcp.md build
// bin/lineagec, then run `lineagec` by name (and an MCP host starts it by
// name): before the first such line they must say how it gets on PATH.
func TestReadmeInstallsLineagec(t *testing.T) {
	bare := regexp.MustCompile(`(^\s*lineagec\s|"command":\s*"lineagec")`)
	for _, file := range []string{"README.md", "docs/mcp.md"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		installed, inFence := false, false // fences indented in list items too
		for i, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), "```") {
				inFence = !inFence
				continue
			}
			if !inFence {
				continue
			}
			if strings.HasPrefix(strings.TrimSpace(l), "go install ./cmd/lineagec") {
				installed = true
			}
			if bare.MatchString(l) {
				if !installed {
					t.Errorf("%s:%d: %q runs lineagec by name, and nothing before it installs it (go install ./cmd/lineagec)", file, i+1, strings.TrimSpace(l))
				}
				break
			}
		}
	}
}
