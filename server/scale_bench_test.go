package server_test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store/file"
	"github.com/lineage-guard/lineage/runtime/store/memory"
	"github.com/lineage-guard/lineage/server/servertest"
)

// scaleAgents is the size of BenchmarkScale: go test ./server/ -run '^$'
// -bench BenchmarkScale -benchtime 1x -scale.agents 100000.
var scaleAgents = flag.Int("scale.agents", 1000, "agents in the store of BenchmarkScale")

// scaleResult is what one run of scale measured.
type scaleResult struct {
	agents                   int
	create, rebuild, startup time.Duration
	open                     time.Duration // of the store, within startup
	heapBefore, heapAfter    uint64        // Go heap in use, after a GC
	rssBefore, rssAfter      uint64
	pendingP50, pendingP99   time.Duration
	agentsP50, agentsP99     time.Duration
	loadedP50, loadedP99     time.Duration
	unloadedP50, unloadedP99 time.Duration
	loadedAfter              int
}

func (r scaleResult) String() string {
	mib := func(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/1e6) }
	return fmt.Sprintf("| %d | %s → %s | %s → %s | %s / %s | %s / %s | %s / %s | %s / %s | %s ms | %d |",
		r.agents, mib(r.heapBefore), mib(r.heapAfter), mib(r.rssBefore), mib(r.rssAfter),
		ms(r.pendingP50), ms(r.pendingP99), ms(r.agentsP50), ms(r.agentsP99),
		ms(r.loadedP50), ms(r.loadedP99), ms(r.unloadedP50), ms(r.unloadedP99), ms(r.startup), r.loadedAfter)
}

const scaleHeader = "| agents | Go heap before → after listing all | RSS before → after | pending page p50 / p99 ms | agents page (100) p50 / p99 ms | decision, loaded p50 / p99 ms | decision, unloaded p50 / p99 ms | start-up to healthy | agents loaded after |"

const scalePolicy = `{"budget": 1000000, "max_pending": 100, "tools": {"pay": {"cost": 0}, "wire": {"cost": 2, "requires_approval": true}}}`

// scale creates n agents through the runtime straight onto a file store,
// then starts the service on it with --max-agents 1000 and measures
// (docs/decisions.md: the scale benchmark).
func scale(tb testing.TB, n int) scaleResult {
	res := scaleResult{agents: n}
	dir := tb.TempDir()
	c, err := compiler.Compile("", []byte(scalePolicy))
	if err != nil {
		tb.Fatal(err)
	}
	// The logs are made on a memory store (no fsync per create) and
	// written into the directory as the file store lays them out; the first
	// open reads every log into the index (rebuild) and saves it at close.
	mem := memory.New()
	rt := runtime.Open(mem, runtime.Options{})
	start := time.Now()
	ids := make([]string, n)
	var wg sync.WaitGroup
	var failed error
	var mu sync.Mutex
	const workers = 8
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				id, err := rt.CreateAgent(context.Background(), c, runtime.CreateOptions{Name: "bot" + strconv.Itoa(i)})
				if err == nil {
					var b []byte
					err = mem.Scan(id, func(_ uint64, rec []byte) error {
						b = append(append(b, rec...), '\n')
						return nil
					})
					if err == nil {
						err = os.WriteFile(filepath.Join(dir, id+file.Ext), b, 0o644)
					}
				}
				if err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
					return
				}
				ids[i] = id
			}
		}()
	}
	wg.Wait()
	if failed != nil {
		tb.Fatal(failed)
	}
	res.create = time.Since(start)
	rt, mem = nil, nil
	start = time.Now()
	st, err := file.Open(dir, file.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	res.rebuild = time.Since(start)
	if err := st.Close(); err != nil {
		tb.Fatal(err)
	}

	// Start-up to healthy: open the store, start the service, GET /health.
	goruntime.GC()
	start = time.Now()
	st, err = file.Open(dir, file.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	res.open = time.Since(start)
	svc := servertest.Start(tb, servertest.WithStore(st), servertest.WithRuntime(func(o *runtime.Options) { o.MaxAgents = 1000 }))
	for {
		resp, err := http.Get(svc.URL + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		time.Sleep(time.Millisecond)
	}
	res.startup = time.Since(start)
	admin, err := client.New(svc.URL, svc.AdminToken, nil)
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()

	// Ten pending requests, and the decisions on loaded agents.
	slices.Sort(ids)
	for i := range 10 {
		if v, err := admin.Request(ctx, ids[i*n/10], lineage.Request{Tool: "wire"}); err != nil || v.Decision != lineage.Pending {
			tb.Fatalf("wire: %+v %v", v, err)
		}
	}
	const samples = 200
	var loaded []time.Duration
	for i := range samples {
		t0 := time.Now()
		if _, err := admin.Request(ctx, ids[i%10*n/10], lineage.Request{Tool: "pay"}); err != nil {
			tb.Fatal(err)
		}
		loaded = append(loaded, time.Since(t0))
	}
	res.loadedP50, res.loadedP99 = pct(loaded)

	heap := func() (uint64, uint64) {
		goruntime.GC()
		var m goruntime.MemStats
		goruntime.ReadMemStats(&m)
		return m.HeapInuse, rss()
	}
	res.heapBefore, res.rssBefore = heap()
	// Every page of agents and of pending requests.
	if all, err := admin.Agents(ctx); err != nil || len(all) != n {
		tb.Fatalf("Agents: %d rows, %v", len(all), err)
	}
	if all, err := admin.Pending(ctx); err != nil || len(all) != 10 {
		tb.Fatalf("Pending: %d rows, %v", len(all), err)
	}
	res.heapAfter, res.rssAfter = heap()

	var pend, pages []time.Duration
	cursor := ""
	for range samples {
		t0 := time.Now()
		if rows, _, err := admin.PendingPage(ctx, client.Page{}); err != nil || len(rows) != 10 {
			tb.Fatalf("pending page: %d rows, %v", len(rows), err)
		}
		pend = append(pend, time.Since(t0))
		t0 = time.Now()
		rows, next, err := admin.AgentsPage(ctx, client.Page{Limit: 100, Cursor: cursor})
		if err != nil || len(rows) == 0 {
			tb.Fatalf("agents page: %d rows, %v", len(rows), err)
		}
		pages = append(pages, time.Since(t0))
		cursor = next
	}
	res.pendingP50, res.pendingP99 = pct(pend)
	res.agentsP50, res.agentsP99 = pct(pages)

	// Decisions on agents not in memory (the last ones by id: never touched).
	var unloaded []time.Duration
	for i := range min(samples, n/2) {
		t0 := time.Now()
		if _, err := admin.Request(ctx, ids[n-1-i], lineage.Request{Tool: "pay"}); err != nil {
			tb.Fatal(err)
		}
		unloaded = append(unloaded, time.Since(t0))
	}
	res.unloadedP50, res.unloadedP99 = pct(unloaded)
	res.loadedAfter = svc.Runtime.Loaded()
	return res
}

func pct(d []time.Duration) (p50, p99 time.Duration) {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2], s[min(len(s)-1, len(s)*99/100)]
}

// rss is the process's resident set size (Linux; 0 elsewhere).
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// BenchmarkScale is the table for -scale.agents agents: run it
// once (-benchtime 1x).
func BenchmarkScale(b *testing.B) {
	for range b.N {
		r := scale(b, *scaleAgents)
		b.ReportMetric(float64(r.pendingP99)/1e6, "pending-p99-ms")
		b.ReportMetric(float64(r.agentsP99)/1e6, "agents-p99-ms")
		b.ReportMetric(float64(r.startup)/1e6, "startup-ms")
		b.ReportMetric(float64(r.heapAfter)/float64(r.heapBefore), "heap-after/before")
		b.Logf("made %d logs in %v; first open (index rebuilt from the logs) %v; the store's open within start-up %v\n%s\n%s", r.agents, r.create, r.rebuild, r.open, scaleHeader, r)
	}
}

// TestScaleSmall runs the scale benchmark at a small size, so CI runs it:
// listing everything keeps the loaded agents within --max-agents and the
// heap within twice what it was.
func TestScaleSmall(t *testing.T) {
	r := scale(t, 300)
	t.Logf("\n%s\n%s", scaleHeader, r)
	if r.loadedAfter > 1000 {
		t.Errorf("%d agents loaded, --max-agents 1000", r.loadedAfter)
	}
	if r.heapAfter > 2*r.heapBefore {
		t.Errorf("Go heap %d after listing everything, %d before", r.heapAfter, r.heapBefore)
	}
}
