package nodes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lineage-guard/lineage/api"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/runtime/store/postgres/pgtest"
)

// proxy is a TCP proxy between a node and the database that can cut every
// connection through it at once, mid-transaction or not.
type proxy struct {
	ln    net.Listener
	to    string
	mu    sync.Mutex
	conns []net.Conn
}

func startProxy(t *testing.T, to string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, to: to}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, d)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(d, c); d.Close() }()
			go func() { _, _ = io.Copy(c, d); c.Close() }()
		}
	}()
	return p
}

// cut closes every connection through the proxy.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestNodeConnectionCut: the connections of one node to the database are
// cut again and again under load. Appends whose answer was lost drop the
// agent's state (D132: a failed append drops the agent); nothing is half-written, every verdict answered 200
// is in the log, the log verifies, and the node goes on (docs/stores.md).
func TestNodeConnectionCut(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and two servers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	direct := pgtest.URL(t)
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, u.Host)
	u.Host = p.ln.Addr().String()
	c := startClusterURLs(t, []string{u.String(), direct})
	seen := &outcomes{base: c.hc.Transport}
	c.hc.Transport = seen
	// If the load spends the whole budget, its last append is two records
	// (the action and the termination): then the agent must be terminated.
	agent, cls := c.agent(ctx, `{"budget": 300, "tools": {"t": {"cost": 1}}}`)

	var (
		mu      sync.Mutex
		answers []got
		after   int // node 0's answers after the last cut
		cuts    int
		lost    int // 503s: the client's retries were used up
		wg      sync.WaitGroup
		stop    = make(chan struct{})
	)
	for w := range 16 {
		node := w % 2
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// Half the workers give no id: the client names the call
				// and retries it with that name (D351 (the Go client names
				// every request)).
				id := ""
				if w%4 < 2 {
					id = fmt.Sprintf("w%d_%d", w, i)
				}
				v, err := cls[node].Request(ctx, agent, lineage.Request{ID: id, Tool: "t"})
				id = v.RequestID
				var e *api.Error
				switch {
				case errors.As(err, &e) && (e.Code == "unavailable" || e.Code == "unknown_outcome"):
					mu.Lock()
					lost++
					mu.Unlock()
					continue // nothing acknowledged; the client gave up its retries
				case err != nil:
					t.Errorf("node %d: %s: %v", node, id, err)
					return
				}
				mu.Lock()
				answers = append(answers, got{id, v})
				if node == 0 && cuts == 5 {
					after++
				}
				mu.Unlock()
			}
		}()
	}
	for range 5 {
		time.Sleep(40 * time.Millisecond)
		p.cut()
		mu.Lock()
		cuts++
		mu.Unlock()
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := after
		mu.Unlock()
		if n >= 20 {
			break
		}
		if time.Now().After(deadline) {
			close(stop)
			wg.Wait()
			t.Fatalf("node 0 answered %d requests after the last cut, want 20", n)
		}
	}
	close(stop)
	wg.Wait()
	allowed := 0
	for _, a := range answers {
		if a.v.Decision == lineage.Allow {
			allowed++
		}
	}
	verdicts, actions := c.logVerdicts(t, ctx, 1, agent)
	for _, a := range answers {
		if a.v.Seq == 0 {
			continue // refused after the budget ran out (D4: refusals that are not recorded): not recorded
		}
		if lv, ok := verdicts[a.id]; !ok || !sameVerdict(lv, a.v) {
			t.Fatalf("%s answered %+v, the log holds %+v (found %v)", a.id, a.v, lv, ok)
		}
		// Every call, retried after an unknown outcome or not, is one record.
		if n := actions[a.id]; n != 1 {
			t.Fatalf("%s answered %+v and is %d records of the log, want exactly one", a.id, a.v, n)
		}
	}
	for id, n := range actions {
		if n != 1 {
			t.Fatalf("request %s is %d records of the log", id, n)
		}
	}
	st0, err0 := c.admin[0].State(ctx, agent)
	st1, err1 := c.admin[1].State(ctx, agent)
	if err0 != nil || err1 != nil || st0.Seq != st1.Seq || st0.Spent != st1.Spent || st0.Spent < int64(allowed) || st0.Spent > 300 {
		t.Fatalf("the nodes disagree after the cuts: %+v %v / %+v %v (%d allowed answers)", st0, err0, st1, err1, allowed)
	}
	if allowed == 300 && st1.Status != lineage.Terminated {
		t.Fatalf("the budget was spent but the agent is %s", st1.Status)
	}
	t.Logf("%d answers, %d allowed, %d after the last cut, %d given up (unavailable or unknown_outcome); %d answers unknown_outcome and %d unavailable retried; log at seq %d, %s",
		len(answers), allowed, after, lost, seen.unknown.Load(), seen.unavailable.Load(), st1.Seq, st1.Status)
}

// outcomes counts the 503s the clients saw, by code, before their retries.
type outcomes struct {
	base                 http.RoundTripper
	unknown, unavailable atomic.Int64
}

func (o *outcomes) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := o.base.RoundTrip(r)
	if err != nil || res.StatusCode != http.StatusServiceUnavailable {
		return res, err
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(b))
	if bytes.Contains(b, []byte(`"unknown_outcome"`)) {
		o.unknown.Add(1)
	} else {
		o.unavailable.Add(1)
	}
	return res, err
}
