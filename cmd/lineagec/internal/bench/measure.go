package bench

import (
	"context"
	"fmt"
	goruntime "runtime"
	"sort"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/policy"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store/memory"
)

// drive runs n agents' ops on the given number of long-lived goroutines (agent
// i on goroutine i % workers; a goroutine interleaves its agents op by op),
// timing each decision. seen, if set, is told every verdict.
func drive(ctx context.Context, n, workers int, do func(agent, k int) (lineage.Verdict, error), perAgent int, seen func(lineage.Verdict)) ([]time.Duration, time.Duration, error) {
	if workers > n {
		workers = n
	}
	lats := make([][]time.Duration, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			l := make([]time.Duration, 0, (n/workers+1)*perAgent)
			for k := 0; k < perAgent; k++ {
				for i := w; i < n; i += workers {
					t0 := time.Now()
					v, err := do(i, k)
					l = append(l, time.Since(t0))
					if err != nil {
						errs[w] = fmt.Errorf("agent %d, decision %d: %w", i, k, err)
						return
					}
					if seen != nil {
						seen(v)
					}
				}
			}
			lats[w] = l
		}(w)
	}
	wg.Wait()
	wall := time.Since(start)
	all, err := joinWorkers(lats, errs)
	if err != nil {
		return nil, 0, err
	}
	return all, wall, nil
}

// recordedInput is one OPA input the runtime built, and its policy's digest.
type recordedInput struct {
	digest string
	input  ast.Value
}

// rawOPA is OPA's floor: each workload policy's query, prepared the way the
// runtime prepares it and evaluated with the runtime's options
// (runtime.EvalOptions), with no log, no store and no state.
type rawOPA struct {
	queries map[string]rego.PreparedEvalQuery // by digest
	options map[string][]rego.EvalOption      // by digest: the runtime's (runtime.EvalOptions)
	names   map[string]string                 // workload name by digest
}

func newRawOPA(ctx context.Context, ws []*workload) (*rawOPA, error) {
	r := &rawOPA{queries: map[string]rego.PreparedEvalQuery{}, options: map[string][]rego.EvalOption{}, names: map[string]string{}}
	for _, w := range ws {
		pq, err := runtime.PrepareQuery(ctx, w.compiled, w.compiled.Query)
		if err != nil {
			return nil, err
		}
		r.queries[w.compiled.Digest], r.names[w.compiled.Digest] = pq, w.name
		r.options[w.compiled.Digest] = runtime.EvalOptions(w.compiled)
	}
	return r, nil
}

// eval evaluates one recorded input and times it.
func (r *rawOPA) eval(ctx context.Context, in recordedInput) (time.Duration, error) {
	pq, ok := r.queries[in.digest]
	if !ok {
		return 0, fmt.Errorf("raw OPA: an input of unknown policy %s", in.digest)
	}
	var opts [4]rego.EvalOption
	t0 := time.Now()
	rs, err := pq.Eval(ctx, append(append(opts[:0], r.options[in.digest]...), rego.EvalParsedInput(in.input))...)
	d := time.Since(t0)
	if err != nil || len(rs) != 1 {
		return 0, fmt.Errorf("raw OPA: %v (%d results)", err, len(rs))
	}
	return d, nil
}

// throughput evaluates every sampled input perInput times, on the given
// number of goroutines, and returns evaluations per second: the most
// decisions per second that OPA alone can make of this workload here.
func (r *rawOPA) throughput(ctx context.Context, sample []recordedInput, perInput, workers int) (float64, error) {
	if len(sample) == 0 {
		return 0, fmt.Errorf("raw OPA: no inputs were recorded")
	}
	lat, wall, err := drive(ctx, len(sample), workers, func(i, _ int) (lineage.Verdict, error) {
		_, err := r.eval(ctx, sample[i])
		return lineage.Verdict{}, err
	}, perInput, nil)
	if err != nil {
		return 0, err
	}
	return float64(len(lat)) / wall.Seconds(), nil
}

// idleStateBytes is the heap an idle agent (genesis and policy only) costs once
// loaded: agents are created through one runtime, then loaded by a second one
// over the same store, and the heap growth of that loading is divided by n.
func idleStateBytes(ctx context.Context, c *policy.Compiled, n int) (int64, error) {
	st := memory.New()
	rt := runtime.Open(st, runtime.Options{})
	ids := make([]string, n)
	var err error
	for i := range ids {
		if ids[i], err = rt.CreateAgent(ctx, c, runtime.CreateOptions{At: genesis}); err != nil {
			return 0, err
		}
	}
	fresh := runtime.Open(st, runtime.Options{})
	if _, err := fresh.State(ctx, ids[0]); err != nil { // prepare the policy's query outside the measurement
		return 0, err
	}
	before := heap()
	for _, id := range ids[1:] {
		if _, err := fresh.State(ctx, id); err != nil {
			return 0, err
		}
	}
	after := heap()
	goruntime.KeepAlive(fresh)
	return int64(after-before) / int64(n-1), nil
}

func heap() uint64 {
	var m goruntime.MemStats
	goruntime.GC()
	goruntime.GC()
	goruntime.ReadMemStats(&m)
	return m.HeapAlloc
}

// longLog builds an agent with n records, then compares its decision latency
// with a fresh agent's on the same ops, and times a full replay of its log.
func longLog(ctx context.Context, w *workload, n int, res *Result, say func(string, ...any)) error {
	st := memory.New()
	rt := runtime.Open(st, runtime.Options{})
	long, err := rt.CreateAgent(ctx, w.compiled, runtime.CreateOptions{At: genesis})
	if err != nil {
		return err
	}
	say("long log: appending %d records", n)
	at := genesis
	for i := 2; i < n; i++ {
		at = at.Add(step)
		if _, err := rt.Request(ctx, long, lineage.Request{Tool: "read_invoice", At: at}); err != nil {
			return err
		}
		if i%200_000 == 0 {
			say("long log: %d records", i)
		}
	}
	const sample = 20_000
	measure := func(agent string, from time.Time) (int64, error) {
		lat := make([]time.Duration, 0, sample)
		t := from
		for i := 0; i < sample; i++ {
			t = t.Add(step)
			t0 := time.Now()
			_, err := rt.Request(ctx, agent, lineage.Request{Tool: "read_invoice", At: t})
			lat = append(lat, time.Since(t0))
			if err != nil {
				return 0, err
			}
		}
		return percentile(lat, 50), nil
	}
	fresh, err := rt.CreateAgent(ctx, w.compiled, runtime.CreateOptions{At: genesis})
	if err != nil {
		return err
	}
	if res.FreshP50, err = measure(fresh, genesis); err != nil {
		return err
	}
	if res.LongLogP50, err = measure(long, at); err != nil {
		return err
	}
	st0, _ := rt.State(ctx, long)
	res.LongLogRecords = int(st0.Seq) + 1
	res.LongLogOverFresh = float64(res.LongLogP50) / float64(res.FreshP50)
	say("long log: p50 %s at %d records, fresh agent p50 %s", time.Duration(res.LongLogP50), res.LongLogRecords, time.Duration(res.FreshP50))

	say("replaying %d records", res.LongLogRecords)
	replay := runtime.Open(st, runtime.Options{})
	t0 := time.Now()
	if _, err := replay.State(ctx, long); err != nil {
		return err
	}
	res.ReplayRecordsPerSec = float64(res.LongLogRecords) / time.Since(t0).Seconds()
	say("replay: %.0f records/s", res.ReplayRecordsPerSec)
	return nil
}

func percentile(d []time.Duration, p int) int64 {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s) - 1) * p / 100
	return int64(s[i])
}

// joinWorkers is the latencies the workers of a run measured, in one slice,
// or the first worker's error.
func joinWorkers(lats [][]time.Duration, errs []error) ([]time.Duration, error) {
	var all []time.Duration
	for w := range lats {
		if errs[w] != nil {
			return nil, errs[w]
		}
		all = append(all, lats[w]...)
	}
	return all, nil
}
