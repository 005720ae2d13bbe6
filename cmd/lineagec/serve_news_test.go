package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lineage-guard/lineage/api"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/runtime/store/postgres/pgtest"
)

// TestServeNodesNews: three `serve --store` processes on one database. A
// held request (?wait=) and the event stream on node 2 see the pending
// requests, approvals, rejections and the termination made on nodes 1 and 3
// within 250 ms of their answer (docs/stores.md, "One stream of news";
// D352 (news by NOTIFY in the append's transaction)). It prints the p99 of
// the news' latency.
func TestServeNodesNews(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and three servers")
	}
	url := pgtest.URL(t)
	data := t.TempDir()
	_, u1, _, _ := startServe(t, data, "--store", url)
	_, u2, _, _ := startServe(t, data, "--store", url)
	_, u3, _, _ := startServe(t, data, "--store", url)
	tok, err := os.ReadFile(filepath.Join(data, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	admin := func(u string) *client.Client {
		c, err := client.New(u, strings.TrimSpace(string(tok)), nil)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a1, a2, a3 := admin(u1), admin(u2), admin(u3)
	cr, err := a1.CreateAgent(ctx, json.RawMessage(`{"budget": 1000, "tools": {"t": {"cost": 1}, "wire": {"cost": 1, "requires_approval": true}}}`), "bot", "")
	if err != nil {
		t.Fatal(err)
	}
	bot := func(u string) *client.Client {
		c, err := client.New(u, cr.Token, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	b1, b3 := bot(u1), bot(u3)

	// The event stream of node 2: each event with when it arrived.
	type seen struct {
		ev api.Event
		at time.Time
	}
	var (
		mu     sync.Mutex
		events []seen
	)
	streaming := make(chan struct{})
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	go func() {
		var once sync.Once
		_ = a2.Events(sctx, func(ev api.Event) error {
			mu.Lock()
			events = append(events, seen{ev, time.Now()})
			mu.Unlock()
			once.Do(func() { close(streaming) })
			return nil
		})
	}()
	// The stream is open once node 2 told of something: a pending request of
	// node 1's, retried until it shows (the stream may open after it).
	for i := 0; ; i++ {
		if i == 20 {
			t.Fatal("node 2's event stream told nothing of 20 pending requests made on node 1")
		}
		if _, err := b1.Request(ctx, cr.Agent, lineage.Request{ID: fmt.Sprintf("open%d", i), Tool: "wire"}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-streaming:
		case <-time.After(300 * time.Millisecond):
			continue
		}
		break
	}
	// event waits up to 5 s for node 2's event of type typ about request id
	// and returns how long after since it arrived.
	event := func(typ, id string, since time.Time) time.Duration {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			mu.Lock()
			for _, s := range events {
				if s.ev.Type == typ && (id == "" || strings.Contains(string(s.ev.Data), `"request_id":"`+id+`"`)) {
					mu.Unlock()
					return max(0, s.at.Sub(since))
				}
			}
			mu.Unlock()
		}
		t.Fatalf("node 2's event stream has no %s event of %q after 5 s", typ, id)
		return 0
	}
	var lat []time.Duration
	bots, admins := []*client.Client{b1, b3}, []*client.Client{a1, a3}
	const rounds = 40
	for i := range rounds {
		w := i % 2 // the writing node: 1 or 3
		id := fmt.Sprintf("w%d", i)
		v, err := bots[w].Request(ctx, cr.Agent, lineage.Request{ID: id, Tool: "wire"})
		done := time.Now()
		if err != nil || v.Decision != lineage.Pending {
			t.Fatalf("%s: %+v, %v", id, v, err)
		}
		lat = append(lat, event("pending", id, done))
		// A waiter on node 2, then a decision on node 1 or 3.
		held := make(chan lineage.Verdict, 1)
		go func() {
			v, err := a2.Verdict(ctx, cr.Agent, id, 20*time.Second)
			if err != nil {
				t.Error(err)
			}
			held <- v
		}()
		time.Sleep(20 * time.Millisecond) // the wait is held
		if i%4 < 2 {
			v, err = admins[1-w].Approve(ctx, cr.Agent, id)
		} else {
			v, err = admins[1-w].Reject(ctx, cr.Agent, id)
		}
		done = time.Now()
		if err != nil {
			t.Fatalf("deciding %s: %v", id, err)
		}
		select {
		case hv := <-held:
			if hv.Decision != v.Decision {
				t.Fatalf("the waiter on node 2 got %+v, the decision was %+v", hv, v)
			}
			lat = append(lat, time.Since(done))
		case <-time.After(5 * time.Second):
			t.Fatalf("the waiter on node 2 for %s did not answer within 5 s of the decision on node %d", id, 3-2*w)
		}
		lat = append(lat, event("decided", id, done))
	}
	// A termination on node 3 ends a wait on node 2 and is in its stream.
	if _, err := b1.Request(ctx, cr.Agent, lineage.Request{ID: "last", Tool: "wire"}); err != nil {
		t.Fatal(err)
	}
	held := make(chan lineage.Verdict, 1)
	go func() {
		v, _ := a2.Verdict(ctx, cr.Agent, "last", 20*time.Second)
		held <- v
	}()
	time.Sleep(20 * time.Millisecond)
	if _, err := a3.Terminate(ctx, cr.Agent, "enough"); err != nil {
		t.Fatal(err)
	}
	done := time.Now()
	select {
	case hv := <-held:
		if hv.Decision != lineage.Deny {
			t.Fatalf("the waiter on node 2 after the termination: %+v", hv)
		}
		lat = append(lat, time.Since(done))
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter on node 2 did not answer within 5 s of the termination on node 3")
	}
	lat = append(lat, event("terminated", "", done))
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	t.Logf("news latency on node 2 of the writes of nodes 1 and 3 (%d events and waits): p50 %s, p99 %s, max %s",
		len(lat), p50.Round(time.Microsecond), p99.Round(time.Microsecond), lat[len(lat)-1].Round(time.Microsecond))
	if p99 > 250*time.Millisecond {
		t.Errorf("p99 of the news is %s, over 250 ms", p99)
	}
}
