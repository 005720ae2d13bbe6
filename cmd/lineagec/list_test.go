package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestListsLimit: agent list and pending read every page of the store's
// indexes by default (more rows than one page of 1000 would be slow to make
// here, so the paging itself is pinned by the server's and the store's
// tests) and stop at --limit.
func TestListsLimit(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte("budget: 9\ntools: { wire: { cost: 4, requires_approval: true } }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 3 {
		code, out := lineagec(t, "--data", data, "agent", "create", "--policy", policy, "--name", "bot")
		if code != 0 {
			t.Fatalf("agent create: exit %d", code)
		}
		id := strings.TrimSpace(out)
		ids = append(ids, id)
		if code, _ := lineagec(t, "--data", data, "request", id, "wire", "--id", "w1"); code != exitPending {
			t.Fatalf("request: exit %d", code)
		}
	}
	sort.Strings(ids)
	if code, out := lineagec(t, "--data", data, "agent", "list"); code != 0 || out != strings.Join(ids, "\n")+"\n" {
		t.Errorf("agent list: exit %d\n%s", code, out)
	}
	if code, out := lineagec(t, "--data", data, "agent", "list", "--limit", "2"); code != 0 || out != strings.Join(ids[:2], "\n")+"\n" {
		t.Errorf("agent list --limit 2: exit %d\n%s", code, out)
	}
	for _, c := range []struct {
		args []string
		want int
	}{{nil, 3}, {[]string{"--limit", "1"}, 1}} {
		code, out := lineagec(t, append([]string{"--data", data, "pending", "--format", "json"}, c.args...)...)
		var got struct {
			Pending []struct {
				Agent, Name, Tool string
				Cost              int64
			}
		}
		if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || len(got.Pending) != c.want {
			t.Fatalf("pending %q: exit %d, %v\n%s", c.args, code, err, out)
		}
		for i, p := range got.Pending {
			if p.Agent != ids[i] || p.Name != "bot" || p.Tool != "wire" || p.Cost != 4 {
				t.Errorf("pending row %d: %+v", i, p)
			}
		}
	}
}

// TestVerifyWarnsOfIndex: verify AGENT compares the store's index with the
// log and warns, exit 0, when they differ (D363 (verify checks the index,
// and only warns)).
func TestVerifyWarnsOfIndex(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte("budget: 9\ntools: { t: { cost: 1 } }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := lineagec(t, "--data", data, "agent", "create", "--policy", policy, "--name", "bot")
	if code != 0 {
		t.Fatalf("agent create: exit %d", code)
	}
	id := strings.TrimSpace(out)
	var stdout, stderr strings.Builder
	if code := run([]string{"--data", data, "verify", id}, &stdout, &stderr); code != 0 || strings.Contains(stderr.String(), "index") {
		t.Fatalf("verify: exit %d, %s", code, stderr.String())
	}
	idx := filepath.Join(data, ".index.json")
	b, err := os.ReadFile(idx)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(idx, []byte(strings.Replace(string(b), `"name":"bot"`, `"name":"bad"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"--data", data, "verify", id}, &stdout, &stderr); code != 0 || !strings.Contains(stderr.String(), "warning: the store's index differs from the log") {
		t.Errorf("verify with a wrong index: exit %d, stderr %q", code, stderr.String())
	}
}
