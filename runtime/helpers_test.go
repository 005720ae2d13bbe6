package runtime_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gowebpki/jcs"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/policy"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store"
	"github.com/lineage-guard/lineage/runtime/store/file"
	"github.com/lineage-guard/lineage/runtime/store/memory"
)

// t0 is genesis time in these tests; sec(n) is n seconds after it.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func sec(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Second))) }

var bg = context.Background()

// compileCache memoizes compiler.CompileRecorded by document: a Compiled is immutable,
// and the property tests reopen many agents.
var compileCache sync.Map // string(doc) → *policy.Compiled

func compileDoc(doc []byte) (*policy.Compiled, error) {
	if c, ok := compileCache.Load(string(doc)); ok {
		return c.(*policy.Compiled), nil
	}
	c, err := compiler.CompileRecorded(doc)
	if err != nil {
		return nil, err
	}
	compileCache.Store(string(doc), c)
	return c, nil
}

// opts are the runtime options of every test: a compiler for reopening agents,
// a clock that must not be needed (tests pass times), deterministic agent ids.
func opts(prefix string) runtime.Options {
	var mu sync.Mutex
	n := 0
	return runtime.Options{
		Compile: compileDoc,
		Clock:   func() time.Time { return t0 },
		NewAgentID: func() string {
			mu.Lock()
			defer mu.Unlock()
			n++
			return fmt.Sprintf("agt_%s_%d", prefix, n)
		},
	}
}

// reopenOpts are options for a fresh runtime over an existing store.
func reopenOpts() runtime.Options {
	return runtime.Options{Compile: compileDoc, Clock: func() time.Time { return t0 }}
}

func mustCompileYAML(t testing.TB, yaml string) *policy.Compiled {
	t.Helper()
	c, err := compiler.Compile("p.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	return c
}

func openFileStore(t testing.TB, dir string) *file.Store {
	t.Helper()
	st, err := file.Open(dir, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func mustCreate(t testing.TB, rt *runtime.Runtime, c *policy.Compiled, o runtime.CreateOptions) string {
	t.Helper()
	if o.At.IsZero() {
		o.At = t0
	}
	id, err := rt.CreateAgent(bg, c, o)
	if err != nil {
		t.Fatalf("CreateAgent: %v", err)
	}
	return id
}

func mustRequest(t testing.TB, rt *runtime.Runtime, agent string, req lineage.Request) lineage.Verdict {
	t.Helper()
	v, err := rt.Request(bg, agent, req)
	if err != nil {
		t.Fatalf("Request(%+v): %v", req, err)
	}
	return v
}

func mustState(t testing.TB, rt *runtime.Runtime, agent string) lineage.State {
	t.Helper()
	st, err := rt.State(bg, agent)
	if err != nil {
		t.Fatalf("State: %v", err)
	}
	return st
}

// storeLines returns an agent's stored lines, copied.
func storeLines(t testing.TB, st store.Store, agent string) [][]byte {
	t.Helper()
	var out [][]byte
	if err := st.Scan(agent, func(_ uint64, rec []byte) error {
		out = append(out, bytes.Clone(rec))
		return nil
	}); err != nil {
		t.Fatalf("Scan %s: %v", agent, err)
	}
	return out
}

// rawStore makes a memory store holding the given lines as agent's log, with
// no check at all: for damaged logs.
func rawStore(t testing.TB, agent string, lines [][]byte) *memory.Store {
	t.Helper()
	m := memory.New()
	if err := m.Create(agent); err != nil {
		t.Fatal(err)
	}
	if err := m.Append(agent, 0, lines...); err != nil {
		t.Fatal(err)
	}
	return m
}

// sealLine builds a stored record line the way docs/log.md defines it, without the
// runtime's code: the JCS of the record, hash = sha256 of the JCS without hash.
func sealLine(t testing.TB, seq uint64, at time.Time, kind lineage.Kind, prev string, body any) (line []byte, hash string) {
	t.Helper()
	rawBody, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]any{
		"seq": seq, "at": at.UTC().Format(lineage.TimeLayout), "kind": string(kind),
		"prev": prev, "body": json.RawMessage(rawBody),
	}
	unsigned := mustJCS(t, m)
	sum := sha256.Sum256(unsigned)
	hash = "sha256:" + hex.EncodeToString(sum[:])
	m["hash"] = hash
	return mustJCS(t, m), hash
}

func mustJCS(t testing.TB, v any) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jcs.Transform(raw)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// chainSeq returns the seq a *runtime.ChainError or *store.DamageError names.
func chainSeq(err error) (uint64, bool) {
	var ce *runtime.ChainError
	if errors.As(err, &ce) {
		return ce.Seq, true
	}
	var de *store.DamageError
	if errors.As(err, &de) {
		return de.Seq, true
	}
	return 0, false
}

// isDamage tells whether err reports a damaged log: corrupt chain or store damage.
func isDamage(err error) bool {
	return errors.Is(err, lineage.ErrCorrupt) || errors.Is(err, store.ErrDamaged)
}

// normalizeState makes two states comparable with reflect.DeepEqual.
func normalizeState(s lineage.State) lineage.State {
	for i := range s.Window {
		s.Window[i] = lineage.Time{Time: s.Window[i].UTC()}
	}
	return s
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func agentPath(dir, agent string) string { return filepath.Join(dir, agent+file.Ext) }

// samplePolicy is the policy of the sample logs: two tools, one needing approval.
const samplePolicy = `
budget: 10
scar_limit: 10
tools:
  pay: {cost: 1}
  wire: {cost: 2, requires_approval: true}
  search: {cost: 0, when: [{expr: "args.q != 'secret'", reason: "secret_query", scar: minor}]}
`

// buildSampleLog writes, through the API, a log with every kind of record:
// genesis, policy, allows, a pending request and its approval, a deny with a
// scar, a constraint deny, and (if kill) a termination. It returns the agent
// and the number of records.
func buildSampleLog(t testing.TB, rt *runtime.Runtime, c *policy.Compiled, kill bool) (string, int) {
	t.Helper()
	agent := mustCreate(t, rt, c, runtime.CreateOptions{Name: "sample", At: t0})
	steps := []struct {
		req  lineage.Request
		want lineage.Decision
	}{
		{lineage.Request{ID: "r1", Tool: "pay", Args: map[string]any{"amount": 12, "to": "acme"}, At: sec(1)}, lineage.Allow},
		{lineage.Request{ID: "w1", Tool: "wire", Args: map[string]any{"iban": "DE00"}, At: sec(2)}, lineage.Pending},
		{lineage.Request{Tool: "shell", Args: map[string]any{"cmd": "rm -rf /"}, At: sec(3)}, lineage.Deny},
		{lineage.Request{ID: "s1", Tool: "search", Args: map[string]any{"q": "secret"}, At: sec(4)}, lineage.Deny},
		{lineage.Request{ID: "s2", Tool: "search", Args: map[string]any{"q": "weather", "n": 1.5}, At: sec(5.25)}, lineage.Allow},
	}
	for i, s := range steps {
		v := mustRequest(t, rt, agent, s.req)
		if v.Decision != s.want {
			t.Fatalf("sample step %d: %+v, want %s", i, v, s.want)
		}
		if i == 1 {
			av, err := rt.Approve(bg, agent, runtime.Approval{RequestID: "w1", By: "alice", At: sec(2.5)})
			if err != nil || av.Decision != lineage.Allow {
				t.Fatalf("approve: %+v %v", av, err)
			}
		}
	}
	mustRequest(t, rt, agent, lineage.Request{ID: "r2", Tool: "pay", At: sec(6)})
	if kill {
		if _, err := rt.Terminate(bg, agent, runtime.Kill{By: "ops", Note: "done", At: sec(7)}); err != nil {
			t.Fatal(err)
		}
	}
	st := mustState(t, rt, agent)
	return agent, int(st.Seq) + 1
}

// lineStarts returns the offset of each line in data (which ends in '\n').
func lineStarts(data []byte) []int {
	starts := []int{0}
	for i, b := range data {
		if b == '\n' && i+1 < len(data) {
			starts = append(starts, i+1)
		}
	}
	return starts
}

// recordAt returns the index of the line holding byte off.
func recordAt(starts []int, off int) int {
	k := 0
	for i, s := range starts {
		if s <= off {
			k = i
		}
	}
	return k
}

func newMem() *memory.Store { return memory.New() }
