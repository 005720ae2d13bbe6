package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestMain makes this test binary double as lineagec: testscript puts it on
// the scripts' PATH under that name.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"lineagec": func() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) },
	})
}

// TestScripts runs testdata/script/*.txtar. Besides testscript's commands,
// the scripts have:
//
//	exits N PROG ARGS...    run PROG like exec; its exit status must be N
//	                        (stdout and stderr are then checked as after exec)
//	capture VAR [REGEXP]    set $VAR to the last command's stdout, trimmed, or
//	                        to the first group of REGEXP matched in it
//	editline FILE N OLD NEW replace the first OLD on line N of FILE by NEW
//	lines N FILE            FILE must have exactly N lines
//	chop FILE N             cut the last N bytes off FILE (a torn write)
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			env.Setenv("LINEAGE_DATA", "") // scripts use ./.lineage or set it themselves
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exits":    cmdExits,
			"capture":  cmdCapture,
			"editline": cmdEditLine,
			"lines":    cmdLines,
			"chop":     cmdChop,
		},
	})
}

func cmdExits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits N program [args...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exits: bad status %q", args[0])
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exits: %v", err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("exit status %d, want %d", got, want)
	}
}

func cmdCapture(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: capture VAR [REGEXP]")
	}
	v := strings.TrimSpace(ts.ReadFile("stdout"))
	if len(args) == 2 {
		m := regexp.MustCompile(args[1]).FindStringSubmatch(v)
		if len(m) < 2 {
			ts.Fatalf("capture: %q does not match the last command's stdout", args[1])
		}
		v = m[1]
	}
	if v == "" {
		ts.Fatalf("capture: nothing to capture")
	}
	ts.Setenv(args[0], v)
}

func cmdEditLine(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 4 {
		ts.Fatalf("usage: editline FILE N OLD NEW")
	}
	n, err := strconv.Atoi(args[1])
	if err != nil || n < 1 {
		ts.Fatalf("editline: bad line number %q", args[1])
	}
	lines := strings.SplitAfter(ts.ReadFile(args[0]), "\n")
	if n > len(lines) || !strings.Contains(lines[n-1], args[2]) {
		ts.Fatalf("editline: line %d of %s does not contain %q", n, args[0], args[2])
	}
	lines[n-1] = strings.Replace(lines[n-1], args[2], args[3], 1)
	ts.Check(os.WriteFile(ts.MkAbs(args[0]), []byte(strings.Join(lines, "")), 0o644))
}

func cmdLines(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: lines N FILE")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("lines: bad count %q", args[0])
	}
	if got := strings.Count(ts.ReadFile(args[1]), "\n"); got != want {
		ts.Fatalf("%s has %d lines, want %d", args[1], got, want)
	}
}

func cmdChop(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: chop FILE N")
	}
	n, err := strconv.Atoi(args[1])
	data := ts.ReadFile(args[0])
	if err != nil || n < 0 || n > len(data) {
		ts.Fatalf("chop: bad byte count %q", args[1])
	}
	ts.Check(os.WriteFile(ts.MkAbs(args[0]), []byte(data[:len(data)-n]), 0o644))
}

func TestExitCode(t *testing.T) {
	for _, c := range []struct {
		err    error
		code   int
		stderr string
	}{
		{nil, exitOK, ""},
		{errors.New("boom"), exitFailure, "lineagec: boom\n"},
		{&exitError{code: exitDeny}, exitDeny, ""},
		{&exitError{code: exitPending}, exitPending, ""},
		{&exitError{code: exitFailure, err: errors.New("bad")}, exitFailure, "lineagec: bad\n"},
		{fmt.Errorf("wrapped: %w", &exitError{code: exitDeny}), exitDeny, ""},
		{&exitError{code: exitOK, err: errors.New("odd")}, exitFailure, "lineagec: odd\n"},
	} {
		var stderr strings.Builder
		if got := exitCode(c.err, &stderr); got != c.code || stderr.String() != c.stderr {
			t.Errorf("exitCode(%v) = %d, %q; want %d, %q", c.err, got, stderr.String(), c.code, c.stderr)
		}
	}
}

// TestNoPanicOnBadInput runs lineagec in-process on malformed input: each
// must end with exit status 1 and say why (a result on stdout, or a
// "lineagec: " message on stderr), never with a panic.
func TestNoPanicOnBadInput(t *testing.T) {
	dir := t.TempDir()
	data := dir + "/data"
	policy := dir + "/p.yaml"
	if err := os.WriteFile(policy, []byte("budget: 1\ntools: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	garbage := dir + "/garbage.jsonl"
	if err := os.WriteFile(garbage, []byte("\x00\xff{\n\n{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if code := run([]string{"--data", data, "agent", "create", "--policy", policy}, &out, io.Discard); code != 0 {
		t.Fatalf("agent create: exit %d", code)
	}
	agent := strings.TrimSpace(out.String())
	for _, args := range [][]string{
		{"request", agent, ""},
		{"request", agent, "t", "--args", "null"},
		{"request", agent, "t", "--args", "{\"a\": NaN}"},
		{"request", agent, "t", "--args", "{\"a\":1}{}"},
		{"request", agent, "t", "--id", strings.Repeat("x", 300)},
		{"approve", agent, "", "--by", ""},
		{"terminate", agent, "--by", ""},
		{"state", ""},
		{"state", strings.Repeat("a", 500)},
		{"log", "-"},
		{"verify", garbage},
		{"check", dir},
		{"compile", policy, "-o", policy},
		{"test", garbage},
		{"schema", "../policy"},
	} {
		var stdout, stderr strings.Builder
		code := run(append([]string{"--data", data}, args...), &stdout, &stderr)
		said := stdout.String() + stderr.String()
		if code != exitFailure || said == "" || strings.Contains(said, "internal error") ||
			(stderr.Len() > 0 && !strings.HasPrefix(stderr.String(), "lineagec: ")) {
			t.Errorf("lineagec %q: exit %d, stdout %q, stderr %q", args, code, stdout.String(), stderr.String())
		}
	}
}
