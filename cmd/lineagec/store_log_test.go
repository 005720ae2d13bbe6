package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	neturl "net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lineage-guard/lineage/api"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store"
	"github.com/lineage-guard/lineage/runtime/store/file"
	"github.com/lineage-guard/lineage/runtime/store/postgres"
	"github.com/lineage-guard/lineage/runtime/store/postgres/pgtest"
	"github.com/lineage-guard/lineage/server"
)

// cli runs lineagec in-process: its exit status, stdout and stderr.
func cli(args ...string) (int, string, string) {
	var stdout, stderr strings.Builder
	code := run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// scriptAgent drives one agent through a runtime over st with a fixed clock
// and id: requests allowed, denied with a scar and pending, an approval and
// a kill (7 records). The same calls on two stores write the same bytes.
func scriptAgent(t *testing.T, st store.Store) string {
	t.Helper()
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rt := runtime.Open(st, runtime.Options{
		Clock:      func() time.Time { return t0 },
		NewAgentID: func() string { return "agt_export" },
	})
	c, err := compiler.Compile("export.yaml", []byte(`
budget: 20
tools:
  read: {cost: 1}
  pay: {cost: 5, requires_approval: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	id, err := rt.CreateAgent(ctx, c, runtime.CreateOptions{Name: "export", At: t0})
	if err != nil {
		t.Fatal(err)
	}
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	steps := []struct {
		req  lineage.Request
		want lineage.Decision
	}{
		{lineage.Request{ID: "r1", Tool: "read", Args: map[string]any{"doc": "ü\u2028<>&"}, At: at(1)}, lineage.Allow},
		{lineage.Request{ID: "r2", Tool: "shell", Args: map[string]any{"cmd": "rm -rf /"}, At: at(2)}, lineage.Deny},
		{lineage.Request{ID: "r3", Tool: "pay", Args: map[string]any{"amount": 12.5}, At: at(3)}, lineage.Pending},
	}
	for _, s := range steps {
		if v, err := rt.Request(ctx, id, s.req); err != nil || v.Decision != s.want {
			t.Fatalf("request %s: %+v, %v; want %s", s.req.ID, v, err, s.want)
		}
	}
	if v, err := rt.Approve(ctx, id, runtime.Approval{RequestID: "r3", By: "alice", At: at(4)}); err != nil || v.Decision != lineage.Allow {
		t.Fatalf("approve: %+v, %v", v, err)
	}
	if _, err := rt.Terminate(ctx, id, runtime.Kill{By: "bob", Note: "audit", At: at(5)}); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestLogStoreExport: the same agent written to the file store and to
// PostgreSQL gives the same `log` bytes; the export verifies offline as a
// file; `state`, `agent list` and `verify AGENT` read the PostgreSQL store;
// a record changed or removed in the database (past the append-only trigger,
// as a superuser may) is caught by `log` and `verify`, naming its seq.
func TestLogStoreExport(t *testing.T) {
	url := pgtest.URL(t)
	dir := t.TempDir()
	fs, err := file.Open(dir, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	id := scriptAgent(t, fs)
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	pg, err := postgres.Open(context.Background(), url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if scriptAgent(t, pg) != id {
		t.Fatal("the two runtimes made different agents")
	}
	if err := pg.Close(); err != nil {
		t.Fatal(err)
	}

	code, fromFile, stderr := cli("log", "--data", dir, id)
	if code != exitOK {
		t.Fatalf("log --data: exit %d: %s", code, stderr)
	}
	code, fromPG, stderr := cli("log", "--store", url, id)
	if code != exitOK || stderr != "" {
		t.Fatalf("log --store: exit %d: %s", code, stderr)
	}
	logFile, err := os.ReadFile(filepath.Join(dir, id+file.Ext))
	if err != nil {
		t.Fatal(err)
	}
	if fromPG != fromFile || fromPG != string(logFile) {
		t.Fatalf("log --store differs from the file store:\n--store:\n%s\n--data:\n%s\nfile:\n%s", fromPG, fromFile, logFile)
	}
	if n := strings.Count(fromPG, "\n"); n != 7 {
		t.Fatalf("log --store: %d records, want 7", n)
	}
	export := filepath.Join(t.TempDir(), "agent.jsonl")
	if err := os.WriteFile(export, []byte(fromPG), 0o644); err != nil {
		t.Fatal(err)
	}
	code, fileOK, stderr := cli("verify", export)
	if code != exitOK || !strings.HasPrefix(fileOK, "ok: 7 records, head sha256:") {
		t.Fatalf("verify the export: exit %d, %q, %s", code, fileOK, stderr)
	}
	if code, out, stderr := cli("verify", "--store", url, id); code != exitOK || out != fileOK || stderr != "" {
		t.Fatalf("verify --store: exit %d, %q, %s; want %q", code, out, stderr, fileOK)
	}
	// The index rows damaged (the agent's name, a request pending that the
	// log decided): verify warns of each, and still answers from the log.
	pgtest.Exec(t, url, fmt.Sprintf(`UPDATE lineage_agent_index SET name = 'wrong!!' WHERE agent = '%s'`, id),
		fmt.Sprintf(`INSERT INTO lineage_pending (agent, seq, request_id, tool, args, at, cost) VALUES ('%s', 3, 'r3', 'pay', '{}', 'then', 5)`, id))
	if code, out, stderr := cli("verify", "--store", url, id); code != exitOK || out != fileOK ||
		!strings.Contains(stderr, "warning: the store's index differs from the log: agent "+id+": index has") ||
		!strings.Contains(stderr, "wrong!!") ||
		!strings.Contains(stderr, `the index has request "r3" (seq 3) pending, the log does not`) {
		t.Fatalf("verify --store of a damaged index: exit %d, %q, stderr %q; want the log's answer and a warning of each row", code, out, stderr)
	}
	pgtest.Exec(t, url, fmt.Sprintf(`UPDATE lineage_agent_index SET name = 'export' WHERE agent = '%s'`, id),
		fmt.Sprintf(`DELETE FROM lineage_pending WHERE agent = '%s'`, id))
	if code, _, stderr := cli("verify", "--store", url, id); code != exitOK || stderr != "" {
		t.Fatalf("verify --store of the index put back: exit %d, stderr %q", code, stderr)
	}
	_, stateFile, _ := cli("state", "--data", dir, id)
	if code, out, stderr := cli("state", "--store", url, id); code != exitOK || out != stateFile || !strings.Contains(out, `"spent": 6`) {
		t.Fatalf("state --store: exit %d, %q, %s; want %q", code, out, stderr, stateFile)
	}
	if code, out, stderr := cli("agent", "list", "--store", url); code != exitOK || out != id+"\n" {
		t.Fatalf("agent list --store: exit %d, %q, %s", code, out, stderr)
	}
	if code, _, stderr := cli("log", "--store", url, "agt_nobody"); code != exitFailure ||
		!strings.Contains(stderr, `unknown agent "agt_nobody" in the PostgreSQL store`) {
		t.Fatalf("log --store of an unknown agent: exit %d, %s", code, stderr)
	}

	// Damage: seq 3 rewritten (the trigger skipped, as a superuser can).
	lines := strings.SplitAfter(fromPG, "\n")
	damage := fmt.Sprintf(`UPDATE lineage_records SET rec = convert_to(replace(convert_from(rec, 'UTF8'), 'rm -rf /', 'ls'), 'UTF8')
		WHERE agent = '%s' AND seq = 3`, id)
	pgtest.Exec(t, url, "SET session_replication_role = replica", damage)
	code, out, stderr := cli("log", "--store", url, id)
	if code != exitFailure || out != strings.Join(lines[:3], "") || !strings.Contains(stderr, "seq 3") {
		t.Errorf("log --store of a log changed at seq 3: exit %d, stderr %q, stdout:\n%s\nwant exit 1, the records before seq 3, an error naming seq 3", code, stderr, out)
	}
	if code, out, _ := cli("verify", "--store", url, id); code != exitFailure || !strings.HasPrefix(out, "damaged at seq 3: ") {
		t.Errorf("verify --store of a log changed at seq 3: exit %d, %q", code, out)
	}
	// Put it back, then remove seq 4: a gap.
	pgtest.Exec(t, url, "SET session_replication_role = replica",
		fmt.Sprintf(`UPDATE lineage_records SET rec = '\x%x' WHERE agent = '%s' AND seq = 3`, strings.TrimSuffix(lines[3], "\n"), id),
		fmt.Sprintf(`DELETE FROM lineage_records WHERE agent = '%s' AND seq = 4`, id))
	code, out, stderr = cli("log", "--store", url, id)
	if code != exitFailure || out != strings.Join(lines[:4], "") || !strings.Contains(stderr, "seq 4") {
		t.Errorf("log --store of a log without seq 4: exit %d, stderr %q, stdout:\n%s", code, stderr, out)
	}
	if code, out, _ := cli("verify", "--store", url, id, "--format", "json"); code != exitFailure || !strings.Contains(out, `"seq": 4`) {
		t.Errorf("verify --store of a log without seq 4: exit %d, %q", code, out)
	}
}

// TestStoreFlagConflicts: --store excludes --data and --server, and a
// command that opens no log refuses it; an explicit --data beats
// $LINEAGE_STORE (D180: '--store' for the agent commands). None of this reaches a database.
func TestStoreFlagConflicts(t *testing.T) {
	const nowhere = "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"log", "--data", t.TempDir(), "--store", nowhere, "agt_x"}, "--data and --store exclude each other"},
		{[]string{"agent", "create", "--store", nowhere, "--data", t.TempDir(), "--policy", "p.yaml"}, "--data and --store exclude each other"},
		{[]string{"--server", "http://127.0.0.1:1", "--store", nowhere, "state", "agt_x"}, "--store and --server exclude each other"},
		{[]string{"check", "--store", nowhere, "p.yaml"}, "lineagec check does not use a store (--store)"},
		{[]string{"key", "generate", "--store", nowhere}, "lineagec key generate does not use a store (--store)"},
		{[]string{"state", "--store", "", "agt_x"}, `--store "" names no store`},
		// The MCP proxy takes --server and opens no store (D222: 'lineagec mcp' refuses '--store' and '--data').
		{[]string{"mcp", "--store", nowhere, "--", "true"}, "lineagec mcp opens no store (--store)"},
		{[]string{"mcp", "--data", t.TempDir(), "--", "true"}, "lineagec mcp opens no store (--data)"},
		{[]string{"mcp", "pins", "--store", nowhere, "--", "true"}, "lineagec mcp pins opens no store (--store)"},
		// bench, serve and store init have a --store of their own, which shadows the global one.
		{[]string{"bench", "--store", nowhere}, `bench: unknown store "` + nowhere + `" (want memory, file or both)`},
		{[]string{"store", "init", "--store", "postgres://a b"}, "store: postgres: "},
	} {
		if code, _, stderr := cli(c.args...); code != exitFailure || !strings.Contains(stderr, c.want) {
			t.Errorf("lineagec %s: exit %d, %q; want 1 and %q", strings.Join(c.args, " "), code, stderr, c.want)
		}
	}
	t.Setenv("LINEAGE_STORE", nowhere)
	if code, _, stderr := cli("log", "--data", t.TempDir(), "agt_x"); code != exitFailure || !strings.Contains(stderr, "unknown agent") {
		t.Errorf("log --data with $LINEAGE_STORE set: exit %d, %q; want the data directory's unknown agent", code, stderr)
	}
	if code, _, stderr := cli("log", "agt_x"); code != exitFailure || !strings.Contains(stderr, "--store: ") || !strings.Contains(stderr, "unavailable") {
		t.Errorf("log with $LINEAGE_STORE at a closed port: exit %d, %q; want the store unavailable", code, stderr)
	}
}

// TestStoreGrants is docs/stores.md's "Writing needs only SELECT and INSERT", with
// the grants of docs/stores.md, read from the page, and nothing else (the page
// revokes PUBLIC's default rights on the database and the schema): the owner
// runs store init; a writer
// runs serve --store and the CLI's writes; a role with SELECT alone exports
// logs, and its writes are refused saying which privilege is missing.
func TestStoreGrants(t *testing.T) {
	admin := pgtest.URL(t)
	u, err := neturl.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	db := strings.TrimPrefix(u.Path, "/")
	as := func(role string) string {
		v := *u
		v.User = neturl.User(role)
		return v.String()
	}
	owner, writer, auditor := db+"_owner", db+"_writer", db+"_auditor"
	// Step 1 of docs/stores.md (the database exists: it changes owner).
	pgtest.Exec(t, admin,
		"CREATE ROLE "+owner+" LOGIN", "CREATE ROLE "+writer+" LOGIN", "CREATE ROLE "+auditor+" LOGIN",
		"ALTER DATABASE "+db+" OWNER TO "+owner)
	if code, out, stderr := cli("store", "init", "--store", as(owner)); code != exitOK {
		t.Fatalf("store init as the owner: exit %d, %q, %s", code, out, stderr)
	}
	pgtest.Exec(t, as(owner), docsGrants(t, map[string]string{
		"lineage_owner": owner, "lineage_writer": writer, "lineage_auditor": auditor, "lineage": db})...)

	// The writer serves: an agent is created and decides over HTTP.
	srv, adm := serveNode(t, "--store", as(writer))
	ctx := context.Background()
	cr, err := adm.CreateAgent(ctx, json.RawMessage(`{"budget": 10, "tools": {"t": {"cost": 1}}}`), "", "")
	if err != nil {
		t.Fatalf("create an agent on serve --store as the writer: %v", err)
	}
	bot := connect(t, srv, cr.Token)
	if v, err := bot.Request(ctx, cr.Agent, lineage.Request{ID: "a", Tool: "t"}); err != nil || v.Decision != lineage.Allow || v.Seq != 2 {
		t.Fatalf("request on serve --store as the writer: %+v, %v", v, err)
	}
	// The writer's CLI appends to the same log, after the node's record.
	if code, out, stderr := cli("request", "--store", as(writer), cr.Agent, "t", "--id", "b"); code != exitOK || !strings.Contains(out, `"seq":3`) {
		t.Fatalf("request --store as the writer: exit %d, %q, %s", code, out, stderr)
	}
	policyFile := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(policyFile, []byte("budget: 1\ntools: {t: {cost: 1}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := cli("agent", "create", "--store", as(writer), "--policy", policyFile); code != exitOK || !strings.HasPrefix(out, "agt_") {
		t.Fatalf("agent create --store as the writer: exit %d, %q, %s", code, out, stderr)
	}

	// The auditor exports, byte for byte what the writer reads.
	_, want, _ := cli("log", "--store", as(writer), cr.Agent)
	if code, out, stderr := cli("log", "--store", as(auditor), cr.Agent); code != exitOK || out != want || strings.Count(out, "\n") != 4 {
		t.Fatalf("log --store as the auditor: exit %d, %s\n%s\nwant\n%s", code, stderr, out, want)
	}
	ckKey := filepath.Join(t.TempDir(), "ck.key")
	if code, _, stderr := cli("key", "generate", "--private", ckKey, "--public", ckKey+".pub"); code != exitOK {
		t.Fatal(stderr)
	}
	for _, args := range [][]string{
		{"verify", cr.Agent}, {"state", cr.Agent}, {"agent", "list", "--format", "table"}, {"pending"},
		{"replay", cr.Agent, "--policy", policyFile}, {"checkpoint", cr.Agent, "--key", ckKey},
	} {
		if code, out, stderr := cli(append(args, "--store", as(auditor))...); code != exitOK {
			t.Errorf("%s --store as the auditor: exit %d, %q, %s", strings.Join(args, " "), code, out, stderr)
		}
	}
	// ... and may not write.
	const refused = "the role lacks a privilege (writing needs SELECT and INSERT on lineage_agents and lineage_records, and SELECT, INSERT, UPDATE and DELETE on lineage_agent_index and lineage_pending)"
	if code, _, stderr := cli("request", "--store", as(auditor), cr.Agent, "t", "--id", "c"); code != exitFailure || !strings.Contains(stderr, refused) {
		t.Errorf("request --store as the auditor: exit %d, %q; want 1 and %q", code, stderr, refused)
	}
	if code, _, stderr := cli("agent", "create", "--store", as(auditor), "--policy", policyFile); code != exitFailure || !strings.Contains(stderr, refused) {
		t.Errorf("agent create --store as the auditor: exit %d, %q; want 1 and %q", code, stderr, refused)
	}
	_, adm2 := serveNode(t, "--store", as(auditor))
	_, err = adm2.CreateAgent(ctx, json.RawMessage(`{"budget": 3, "tools": {"t": {"cost": 1}}}`), "", "")
	var ce *api.Error
	if !errors.As(err, &ce) || ce.Status != 503 || ce.Code != "unavailable" || !strings.Contains(ce.Message, refused) {
		t.Errorf("create an agent on serve --store as the auditor: %v; want 503 unavailable, %q", err, refused)
	}
	if _, err := bot.Request(ctx, cr.Agent, lineage.Request{ID: "c", Tool: "t"}); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := cli("log", "--store", as(auditor), cr.Agent); code != exitOK || strings.Count(out, "\n") != 5 {
		t.Errorf("the auditor's refused request wrote something, or the writer's did not land: exit %d\n%s", code, out)
	}
	// Nor may the writer make the schema: store init needs the owner.
	if code, _, stderr := cli("store", "init", "--store", as(writer)); code != exitFailure || !strings.Contains(stderr, "the role may not create the schema: run it as the database's owner") {
		t.Errorf("store init as the writer: exit %d, %q; want refused, asking for the owner", code, stderr)
	}
}

// docsGrants returns step 3 of the SQL in docs/stores.md's "Roles and
// grants", its names replaced by names: what TestStoreGrants runs.
func docsGrants(t *testing.T, names map[string]string) []string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/stores.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "\n## Roles and grants\n")
	_, block, _ := strings.Cut(section, "```sql\n")
	block, _, _ = strings.Cut(block, "```")
	_, step3, ok := strings.Cut(block, "-- 3.")
	if !ok {
		t.Fatal(`docs/stores.md: no "-- 3." step in the SQL of "Roles and grants"`)
	}
	_, step3, _ = strings.Cut(step3, "\n") // the step's comment
	name := regexp.MustCompile(`\blineage(_owner|_writer|_auditor)?\b`)
	var stmts []string
	for _, stmt := range strings.Split(step3, ";") {
		if stmt = strings.TrimSpace(stmt); stmt != "" {
			stmts = append(stmts, name.ReplaceAllStringFunc(stmt, func(n string) string { return names[n] }))
		}
	}
	if len(stmts) < 4 {
		t.Fatalf("docs/stores.md: %d statements in step 3 of the grants: %q", len(stmts), stmts)
	}
	return stmts
}

// TestServeNodesShareKeys is docs/stores.md's "Several nodes": nodes with
// folders of their own share the agent tokens only through the same
// --server-key, and the admins through the same --auth; a node whose key
// file is missing makes a fresh key and refuses the others' agent tokens.
func TestServeNodesShareKeys(t *testing.T) {
	url := pgtest.URL(t)
	keys := t.TempDir()
	keyFile, authFile := filepath.Join(keys, "server.key"), filepath.Join(keys, "auth.yaml")
	if err := os.WriteFile(keyFile, server.NewKey(), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := cli("token", "--name", "ops", "--role", "admin")
	tok, line, _ := strings.Cut(strings.TrimSpace(out), "\n")
	if code != exitOK || line == "" {
		t.Fatalf("token: exit %d, %q, %s", code, out, stderr)
	}
	// The line pastes as it is under "principals:" (D305: the token's line pastes as a list item).
	if err := os.WriteFile(authFile, []byte("principals:\n"+line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	node := func(args ...string) string {
		_, u, _, _ := startServe(t, t.TempDir(), append([]string{"--store", url, "--auth", authFile}, args...)...)
		return u
	}
	a, b, fresh := node("--server-key", keyFile), node("--server-key", keyFile), node()
	ctx := context.Background()
	on := func(u, token string) *client.Client { return connect(t, u, token) }
	cr, err := on(a, tok).CreateAgent(ctx, json.RawMessage(`{"budget": 10, "tools": {"t": {"cost": 1}}}`), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := on(b, cr.Token).Request(ctx, cr.Agent, lineage.Request{ID: "x", Tool: "t"}); err != nil || v.Seq != 2 {
		t.Fatalf("node b, agent token made on node a: %+v, %v", v, err)
	}
	var ce *api.Error
	if _, err := on(fresh, cr.Token).Request(ctx, cr.Agent, lineage.Request{ID: "y", Tool: "t"}); !errors.As(err, &ce) || ce.Status != 401 {
		t.Fatalf("node with its own key, agent token made on node a: %v; want 401", err)
	}
	if st, err := on(fresh, tok).State(ctx, cr.Agent); err != nil || st.Seq != 2 {
		t.Fatalf("node with its own key, the admin of the shared --auth: seq %d, %v; want 2", st.Seq, err)
	}
}

// TestStoreCommandsBothWays runs the same CLI session on a data directory and
// on the PostgreSQL store: every command of D180 ('--store' for the agent commands) answers the same, exit
// status and output, once agent ids, times and hashes are masked.
func TestStoreCommandsBothWays(t *testing.T) {
	url := pgtest.URL(t)
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pol := write("p.yaml", "budget: 10\ntools:\n  read: {cost: 1}\n  pay: {cost: 3, requires_approval: true}\n")
	pol2 := write("p2.yaml", "budget: 10\ntools:\n  read: {cost: 1}\n  pay: {cost: 3}\n")
	if code, _, stderr := cli("key", "generate", "--private", filepath.Join(dir, "ck.key"), "--public", filepath.Join(dir, "ck.pub")); code != exitOK {
		t.Fatal(stderr)
	}
	mask := regexp.MustCompile(`agt_[a-z2-7]{26}|sha256:[0-9a-f]{64}|sha256:[0-9a-f]{12}…|\d{4}-\d\d-\d\dT[0-9:.]+Z|[A-Za-z0-9+/]{40,}={0,2}`)
	session := func(where ...string) []string {
		var outs []string
		step := func(args ...string) string {
			code, out, stderr := cli(append(args, where...)...)
			outs = append(outs, fmt.Sprintf("%s → exit %d\n%s%s", strings.Join(args, " "), code, out, stderr))
			return strings.TrimSpace(out)
		}
		id := step("agent", "create", "--policy", pol, "--name", "both")
		step("request", id, "read", "--id", "r1")
		step("request", id, "pay", "--id", "p1", "--args", `{"amount": 2}`)
		step("request", id, "pay", "--id", "p2")
		step("pending")
		step("approve", id, "p1", "--by", "alice")
		step("reject", id, "p2", "--by", "alice")
		step("state", id)
		step("log", id, "--format", "table")
		step("verify", id, "--format", "json")
		step("replay", id, "--policy", pol2)
		step("checkpoint", id, "--key", filepath.Join(dir, "ck.key"), "--note-only")
		step("terminate", id, "--by", "bob", "--reason", "done")
		step("request", id, "read", "--id", "r2")
		step("agent", "list", "--format", "table")
		return outs
	}
	files, pg := session("--data", filepath.Join(dir, "data")), session("--store", url)
	for i := range files {
		f, p := mask.ReplaceAllString(files[i], "…"), mask.ReplaceAllString(pg[i], "…")
		if f != p {
			t.Errorf("--data and --store answer differently:\n--data:\n%s\n--store:\n%s", f, p)
		}
	}
	if !strings.Contains(pg[len(pg)-1], "terminated") {
		t.Errorf("agent list --store after terminate:\n%s", pg[len(pg)-1])
	}
}

// serveNode starts `lineagec serve` with args on a data folder of its own
// and returns its URL and a client with its admin token (<data>/admin.token).
func serveNode(t *testing.T, args ...string) (string, *client.Client) {
	t.Helper()
	data := t.TempDir()
	_, u, _, _ := startServe(t, data, args...)
	tok, err := os.ReadFile(filepath.Join(data, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	return u, connect(t, u, strings.TrimSpace(string(tok)))
}

// connect is a client of the server at u with token, which does not retry
// (a 503 is an answer the tests look at).
func connect(t *testing.T, u, token string) *client.Client {
	t.Helper()
	c, err := client.New(u, token, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Retries = 0
	return c
}
