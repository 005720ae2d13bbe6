package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestReadVersion: the VCS stamp and the engines' versions come from the
// build information; a replaced dependency reports the replacement.
func TestReadVersion(t *testing.T) {
	info := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/lineage-guard/lineage", Version: "v2.1.0"},
		Deps: []*debug.Module{
			{Path: "github.com/open-policy-agent/opa", Version: "v1.22.3"},
			{Path: "github.com/google/cel-go", Version: "v0.31.0", Replace: &debug.Module{Path: "../cel-go", Version: "v0.31.1"}},
		},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "19cf2c6"},
			{Key: "vcs.time", Value: "2026-12-01T18:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	v := readVersion(info)
	if v.Module != "github.com/lineage-guard/lineage" || v.Version != "v2.1.0" || v.Go != "go1.26.8" ||
		v.Revision != "19cf2c6" || v.Time != "2026-12-01T18:00:00Z" || v.Modified == nil || !*v.Modified ||
		v.OPA != "v1.22.3" || v.CELGo != "v0.31.1" {
		t.Errorf("readVersion = %+v", v)
	}
	var b strings.Builder
	if err := writeVersionText(&b, readVersion(&debug.BuildInfo{Main: debug.Module{Path: "m"}})); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"lineagec  (devel)\n", "revision  unknown\n", "modified  unknown\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text without VCS stamp:\n%s\nwant a line %q", b.String(), want)
		}
	}
}

// TestVersionOfBuiltBinary builds lineagec as a user does (go build in a
// git clone) and checks that `version --format json` reports the clone's HEAD
// and commit time, and whether its tree has changes. It clones this
// checkout's HEAD because Go stamps no VCS information in a git worktree
// (where .git is a file), so it tests the committed code.
func TestVersionOfBuiltBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("clones the checkout and builds the binary twice")
	}
	git := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			if os.Getenv("CI") == "true" { // CI runs in a clone: git must work there
				t.Fatalf("git %s: %v", strings.Join(args, " "), err)
			}
			t.Skipf("git %s: %v (not a git checkout?)", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out))
	}
	root := git(".", "rev-parse", "--show-toplevel")
	clone := filepath.Join(t.TempDir(), "lineage")
	git(".", "clone", "--quiet", "--shared", root, clone)
	head := git(clone, "rev-parse", "HEAD")
	unix, err := strconv.ParseInt(git(clone, "log", "-1", "--format=%ct"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	version := func(modified bool) {
		t.Helper()
		bin := filepath.Join(t.TempDir(), "lineagec")
		build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "./cmd/lineagec")
		build.Dir = clone
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		out, err := exec.Command(bin, "version", "--format", "json").Output()
		if err != nil {
			t.Fatalf("lineagec version: %v", err)
		}
		var v versionInfo
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if v.Module != "github.com/lineage-guard/lineage" || v.Revision != head || v.Modified == nil || *v.Modified != modified {
			t.Errorf("version = %s\nwant module github.com/lineage-guard/lineage, revision %s, modified %v", out, head, modified)
		}
		if at, err := time.Parse(time.RFC3339, v.Time); err != nil || at.Unix() != unix {
			t.Errorf("time %q, want the commit time %s", v.Time, time.Unix(unix, 0).UTC().Format(time.RFC3339))
		}
	}
	version(false)
	if err := os.WriteFile(filepath.Join(clone, "README.md"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	version(true)
}
