package runtime_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/runtime"
)

// TestWatchLogs: the watcher hears of every append, with the log's last seq,
// and of every agent that leaves memory.
func TestWatchLogs(t *testing.T) {
	o := opts("agt_watch")
	o.MaxAgents = 1
	rt := runtime.Open(newMem(), o)
	var mu sync.Mutex
	var heard []string
	rt.WatchLogs(&runtime.LogWatch{
		Appended: func(agent string, seq uint64) {
			mu.Lock()
			heard = append(heard, fmt.Sprintf("%s+%d", agent, seq))
			mu.Unlock()
		},
		Unloaded: func(agent string) { mu.Lock(); heard = append(heard, agent+" left"); mu.Unlock() },
	})
	c := mustCompileYAML(t, samplePolicy)
	a := mustCreate(t, rt, c, runtime.CreateOptions{At: t0})
	mustRequest(t, rt, a, lineage.Request{Tool: "pay", At: sec(1)})
	mustRequest(t, rt, a, lineage.Request{Tool: "shell", At: sec(2)}) // a scarred deny: one record
	b := mustCreate(t, rt, c, runtime.CreateOptions{At: t0})
	mustRequest(t, rt, a, lineage.Request{Tool: "pay", At: sec(3)}) // reopened: b leaves
	mu.Lock()
	defer mu.Unlock()
	want := fmt.Sprint([]string{a + "+1", a + "+2", a + "+3", a + " left", b + "+1", b + " left", a + "+4"})
	if fmt.Sprint(heard) != want {
		t.Fatalf("heard\n%v\nwant\n%v", heard, want)
	}
}

// TestVerifyTail: a tail is verified strictly from a given head, which must
// be its records' prev; ChainHashes checks only the chain. A body rewritten
// out of canonical form and re-hashed passes the chain and fails the tail.
func TestVerifyTail(t *testing.T) {
	mem := newMem()
	rt := runtime.Open(mem, opts("agt_tail"))
	agent, n := buildSampleLog(t, rt, mustCompileYAML(t, samplePolicy), true)
	recs, err := rt.Records(agent)
	if err != nil {
		t.Fatal(err)
	}
	tail := func(rt *runtime.Runtime, from uint64, prev string, kind lineage.Kind) ([]string, error) {
		var hs []string
		err := rt.VerifyTail(agent, from, 0, prev, kind, func(r lineage.Record) error { hs = append(hs, r.Hash); return nil })
		return hs, err
	}
	for from := range uint64(n) {
		prev, kind := "", lineage.Kind("")
		if from > 0 {
			prev, kind = recs[from-1].Hash, recs[from-1].Kind
		}
		hs, err := tail(rt, from, prev, kind)
		if err != nil || fmt.Sprint(hs) != fmt.Sprint(hashesOf(recs[from:])) {
			t.Fatalf("from %d: %v %v", from, hs, err)
		}
	}
	if _, err := tail(rt, 4, recs[2].Hash, recs[2].Kind); err == nil {
		t.Error("a tail from a head that is not its prev verified")
	} else if seq, _ := chainSeq(err); seq != 4 {
		t.Errorf("a tail from the wrong head: %v, want seq 4 named", err)
	}
	if _, err := tail(rt, uint64(n), recs[n-1].Hash, lineage.KindTermination); err != nil {
		t.Errorf("an empty tail: %v", err)
	}
	var chained []string
	if err := rt.ChainHashes(agent, uint64(n)+5, func(_ uint64, h string, _ lineage.Kind) error { chained = append(chained, h); return nil }); err != nil ||
		fmt.Sprint(chained) != fmt.Sprint(hashesOf(recs)) {
		t.Fatalf("ChainHashes: %v %v", chained, err)
	}

	// Record 2 (an action) with a space in its body, re-hashed: the last record.
	lines := storeLines(t, mem, agent)[:3]
	line := bytes.Replace(lines[2], []byte(`{"request":`), []byte(`{ "request":`), 1)
	i := bytes.Index(line, []byte(`,"hash":"`))
	unsigned := append(bytes.Clone(line[:i]), line[i+len(`,"hash":"`)+71+1:]...)
	sum := sha256.Sum256(unsigned)
	lines[2] = append(append(append(bytes.Clone(line[:i]), `,"hash":"sha256:`...), hex.EncodeToString(sum[:])...), line[i+len(`,"hash":"`)+71:]...)
	bad := runtime.Open(rawStore(t, agent, lines), opts("agt_tail"))
	if err := bad.ChainHashes(agent, 3, func(uint64, string, lineage.Kind) error { return nil }); err != nil {
		t.Fatalf("the re-hashed line should chain, else the test proves nothing: %v", err)
	}
	if _, err := tail(bad, 2, recs[1].Hash, recs[1].Kind); err == nil {
		t.Error("a non-canonical record verified strictly")
	} else if seq, _ := chainSeq(err); seq != 2 {
		t.Errorf("a non-canonical record: %v, want seq 2 named", err)
	}
	// upto bounds what is read: the bad record at seq 2 is past upto 2, so a
	// tail from 1 reads record 1 only, and vouches for nothing it did not read.
	var read []uint64
	if err := bad.VerifyTail(agent, 1, 2, recs[0].Hash, recs[0].Kind, func(r lineage.Record) error { read = append(read, r.Seq); return nil }); err != nil ||
		fmt.Sprint(read) != "[1]" {
		t.Errorf("a tail from 1 up to 2: read %v, %v; want [1] and no error", read, err)
	}
}

func hashesOf(recs []lineage.Record) []string {
	var hs []string
	for _, r := range recs {
		hs = append(hs, r.Hash)
	}
	return hs
}
