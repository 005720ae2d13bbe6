package runtime_test

import (
	"sync"
	"testing"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store/memory"
)

// longLogRecords is the length of the log the long-log benchmarks start from.
const longLogRecords = 100_000

// cheapPolicy allows everything, costs nothing and has no rate limit, so a
// log can grow without end.
const cheapPolicy = "budget: 0\ntools: {read: {cost: 0}}\n"

var longLog struct {
	once  sync.Once
	agent string
	lines [][]byte // the log's records, shared read-only
	err   error
}

// buildLongLog appends longLogRecords records through the API, once per process.
func buildLongLog(b *testing.B) (string, [][]byte) {
	longLog.once.Do(func() {
		st := memory.New()
		rt := runtime.Open(st, opts("long"))
		c := mustCompileYAML(b, cheapPolicy)
		agent := mustCreate(b, rt, c, runtime.CreateOptions{})
		for i := 2; i < longLogRecords; i++ {
			if _, err := rt.Request(bg, agent, lineage.Request{Tool: "read", At: t0.Add(time.Duration(i) * time.Millisecond)}); err != nil {
				longLog.err = err
				return
			}
		}
		longLog.agent = agent
		longLog.lines = storeLines(b, st, agent)
	})
	if longLog.err != nil {
		b.Fatal(longLog.err)
	}
	if len(longLog.lines) != longLogRecords {
		b.Fatalf("long log has %d records", len(longLog.lines))
	}
	return longLog.agent, longLog.lines
}

// benchRequests runs b.N requests against agent, which is already loaded.
func benchRequests(b *testing.B, rt *runtime.Runtime, agent string, start time.Time) {
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		v, err := rt.Request(bg, agent, lineage.Request{Tool: "read", At: start.Add(time.Duration(i) * time.Millisecond)})
		if err != nil || v.Decision != lineage.Allow {
			b.Fatal(v, err)
		}
	}
}

// BenchmarkRequestFresh: requests on a new agent (memory store). Compare with
// BenchmarkRequestLongLog: the cost of a request must not grow with the log.
func BenchmarkRequestFresh(b *testing.B) {
	rt := runtime.Open(memory.New(), opts("fresh"))
	agent := mustCreate(b, rt, mustCompileYAML(b, cheapPolicy), runtime.CreateOptions{})
	mustState(b, rt, agent)
	benchRequests(b, rt, agent, t0.Add(time.Hour))
}

// BenchmarkRequestLongLog: requests on an agent whose log already holds
// 100,000 records (memory store).
func BenchmarkRequestLongLog(b *testing.B) {
	agent, lines := buildLongLog(b)
	st := memory.New()
	if err := st.Create(agent); err != nil {
		b.Fatal(err)
	}
	if err := st.Append(agent, 0, lines...); err != nil {
		b.Fatal(err)
	}
	rt := runtime.Open(st, reopenOpts())
	if s := mustState(b, rt, agent); s.Seq != longLogRecords-1 {
		b.Fatalf("seq %d", s.Seq)
	}
	benchRequests(b, rt, agent, t0.Add(time.Hour))
}

// BenchmarkReplay: opening an agent with 100,000 records (memory store):
// read, verify and fold the whole log. Reports records/s.
func BenchmarkReplay(b *testing.B) {
	agent, lines := buildLongLog(b)
	st := memory.New()
	if err := st.Create(agent); err != nil {
		b.Fatal(err)
	}
	if err := st.Append(agent, 0, lines...); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, err := runtime.Open(st, reopenOpts()).State(bg, agent)
		if err != nil || s.Seq != longLogRecords-1 {
			b.Fatal(s.Seq, err)
		}
	}
	b.ReportMetric(float64(b.N)*longLogRecords/b.Elapsed().Seconds(), "records/s")
}

// schemaPolicy is cheapPolicy with an argument schema on its tool
// (docs/policy.md#argument-schemas): every request evaluates OPA's
// json.match_schema on its args.
const schemaPolicy = `budget: 0
tools:
  read:
    cost: 0
    args_schema:
      type: object
      properties:
        path: { type: string, maxLength: 256 }
        n: { type: integer, minimum: 0, maximum: 100 }
      required: [path]
      additionalProperties: false
`

// BenchmarkRequestArgsSchema: BenchmarkRequestFresh with an argument schema
// and args that match it.
func BenchmarkRequestArgsSchema(b *testing.B) {
	rt := runtime.Open(memory.New(), opts("schema"))
	agent := mustCreate(b, rt, mustCompileYAML(b, schemaPolicy), runtime.CreateOptions{})
	mustState(b, rt, agent)
	start := t0.Add(time.Hour)
	args := map[string]any{"path": "/tmp/a.txt", "n": 7}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		v, err := rt.Request(bg, agent, lineage.Request{Tool: "read", Args: args, At: start.Add(time.Duration(i) * time.Millisecond)})
		if err != nil || v.Decision != lineage.Allow {
			b.Fatal(v, err)
		}
	}
}
