// Package storetest owns the contract that every store.Store implementation
// must pass (the file, memory and PostgreSQL stores: Default holds package
// store's sentinels and limits for them), and the helpers to write more
// tests and benchmarks of a store.
//
// Run takes the sentinels and limits as a Contract and the store as the
// method set Store declares, so that a test can run the contract against a
// wrapper of a store.
package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Store is store.Store's method set; see there for the contract.
type Store interface {
	Create(agent string) error
	Append(agent string, firstSeq uint64, recs ...[]byte) error
	Scan(agent string, fn func(seq uint64, rec []byte) error) error
	Agents() ([]string, error)
	Close() error
}

// Contract names package store's sentinels and limits (store.ErrExists, ...,
// store.MaxAgentID, store.MaxRecord).
type Contract struct {
	ErrExists, ErrNotFound, ErrSeq, ErrClosed, ErrBadAgent, ErrBadRecord error
	MaxAgentID, MaxRecord                                                int
	// Lists reads the store's indexes; nil skips their part of the contract.
	Lists *Lists
}

// Rec is the test record seq of agent: distinct, one line, of varying length.
func Rec(agent string, seq uint64) []byte {
	pad := strings.Repeat("x", int(seq*37%90))
	return fmt.Appendf(nil, `{"agent":%q,"seq":%d,"pad":%q}`, agent, seq, pad)
}

// ScanAll returns a copy of every record of agent's log.
func ScanAll(t testing.TB, s Store, agent string) [][]byte {
	t.Helper()
	var out [][]byte
	err := s.Scan(agent, func(seq uint64, r []byte) error {
		if seq != uint64(len(out)) {
			t.Fatalf("Scan(%s): seq %d after %d records", agent, seq, len(out))
		}
		out = append(out, bytes.Clone(r))
		return nil
	})
	if err != nil {
		t.Fatalf("Scan(%s): %v", agent, err)
	}
	return out
}

// WantLog checks that agent's log holds Rec(agent, 0..n-1).
func WantLog(t testing.TB, s Store, agent string, n int) {
	t.Helper()
	got := ScanAll(t, s, agent)
	if len(got) != n {
		t.Fatalf("%s: %d records, want %d", agent, len(got), n)
	}
	for i, r := range got {
		if w := Rec(agent, uint64(i)); !bytes.Equal(r, w) {
			t.Fatalf("%s: record %d = %q, want %q", agent, i, r, w)
		}
	}
}

func MustAppend(t testing.TB, s Store, agent string, first uint64, n int) {
	t.Helper()
	recs := make([][]byte, n)
	for i := range recs {
		recs[i] = Rec(agent, first+uint64(i))
	}
	if err := s.Append(agent, first, recs...); err != nil {
		t.Fatalf("Append(%s, %d, %d records): %v", agent, first, n, err)
	}
}

func MustCreate(t testing.TB, s Store, agent string) {
	t.Helper()
	if err := s.Create(agent); err != nil {
		t.Fatalf("Create(%s): %v", agent, err)
	}
}

// Run runs the Store contract against stores made by newStore, with c naming
// the sentinels and limits that the store must honour. Each store is closed by
// the test when it is done with it.
func Run(t *testing.T, c Contract, newStore func(t *testing.T) Store) {
	open := func(t *testing.T) Store {
		s := newStore(t)
		t.Cleanup(func() { s.Close() })
		return s
	}

	if c.Lists != nil {
		runIndex(t, c, open)
	}

	t.Run("RoundTrip", func(t *testing.T) {
		s := open(t)
		MustCreate(t, s, "agt_a")
		WantLog(t, s, "agt_a", 0)
		MustAppend(t, s, "agt_a", 0, 1)
		MustAppend(t, s, "agt_a", 1, 3)
		if err := s.Append("agt_a", 4, Rec("agt_a", 4)); err != nil {
			t.Fatal(err)
		}
		WantLog(t, s, "agt_a", 5)
		if err := s.Append("agt_a", 5); err != nil {
			t.Fatalf("Append of no records at the right seq: %v", err)
		}
		if err := s.Append("agt_a", 9); !errors.Is(err, c.ErrSeq) {
			t.Fatalf("Append of no records at a wrong seq: %v, want ErrSeq", err)
		}
		ids, err := s.Agents()
		if err != nil || !slices.Equal(ids, []string{"agt_a"}) {
			t.Fatalf("Agents() = %q, %v", ids, err)
		}
	})

	t.Run("Exists", func(t *testing.T) {
		s := open(t)
		MustCreate(t, s, "agt_a")
		MustAppend(t, s, "agt_a", 0, 2)
		err := s.Create("agt_a")
		if !errors.Is(err, c.ErrExists) || !strings.Contains(err.Error(), "agt_a") {
			t.Fatalf("second Create: %v, want ErrExists naming the agent", err)
		}
		WantLog(t, s, "agt_a", 2)
	})

	t.Run("NotFound", func(t *testing.T) {
		s := open(t)
		if err := s.Append("agt_none", 0, Rec("agt_none", 0)); !errors.Is(err, c.ErrNotFound) {
			t.Fatalf("Append: %v, want ErrNotFound", err)
		}
		err := s.Scan("agt_none", func(uint64, []byte) error { return nil })
		if !errors.Is(err, c.ErrNotFound) || !strings.Contains(err.Error(), "agt_none") {
			t.Fatalf("Scan: %v, want ErrNotFound naming the agent", err)
		}
		MustCreate(t, s, "agt_none") // a miss does not leave anything behind
		WantLog(t, s, "agt_none", 0)
	})

	t.Run("Seq", func(t *testing.T) {
		s := open(t)
		MustCreate(t, s, "agt_a")
		for _, first := range []uint64{1, 7} {
			if err := s.Append("agt_a", first, Rec("agt_a", first)); !errors.Is(err, c.ErrSeq) {
				t.Fatalf("gap at %d on an empty log: %v, want ErrSeq", first, err)
			}
		}
		MustAppend(t, s, "agt_a", 0, 3)
		for _, first := range []uint64{0, 1, 2, 4, 100} {
			err := s.Append("agt_a", first, Rec("agt_a", first), Rec("agt_a", first+1))
			if !errors.Is(err, c.ErrSeq) {
				t.Fatalf("Append at %d on a log of 3: %v, want ErrSeq", first, err)
			}
		}
		WantLog(t, s, "agt_a", 3)
		MustAppend(t, s, "agt_a", 3, 1)
		WantLog(t, s, "agt_a", 4)
	})

	t.Run("BadAgent", func(t *testing.T) {
		s := open(t)
		bad := []string{"", ".", "..", "../x", ".hidden", "a/b", `a\b`, "a b", "a\x00", "a\n", "é",
			strings.Repeat("a", c.MaxAgentID+1), "agt_a.jsonl/../../x"}
		for _, id := range bad {
			if err := s.Create(id); !errors.Is(err, c.ErrBadAgent) {
				t.Errorf("Create(%q): %v, want ErrBadAgent", id, err)
			}
			if err := s.Append(id, 0, []byte("{}")); !errors.Is(err, c.ErrBadAgent) {
				t.Errorf("Append(%q): %v, want ErrBadAgent", id, err)
			}
			if err := s.Scan(id, func(uint64, []byte) error { return nil }); !errors.Is(err, c.ErrBadAgent) {
				t.Errorf("Scan(%q): %v, want ErrBadAgent", id, err)
			}
		}
		for _, id := range []string{"a", "A.b-c_d", "agt_" + strings.Repeat("Z", c.MaxAgentID-4), "x..y", "x."} {
			MustCreate(t, s, id)
		}
		ids, err := s.Agents()
		if err != nil || len(ids) != 5 {
			t.Fatalf("Agents() = %q, %v", ids, err)
		}
	})

	t.Run("BadRecord", func(t *testing.T) {
		s := open(t)
		MustCreate(t, s, "agt_a")
		MustAppend(t, s, "agt_a", 0, 1)
		for _, r := range [][]byte{nil, {}, []byte("a\nb"), []byte("\n"), make([]byte, c.MaxRecord+1)} {
			err := s.Append("agt_a", 1, Rec("agt_a", 1), r)
			if !errors.Is(err, c.ErrBadRecord) || !strings.Contains(err.Error(), "record 2") {
				t.Fatalf("Append of %.10q: %v, want ErrBadRecord naming record 2", r, err)
			}
		}
		WantLog(t, s, "agt_a", 1)
	})

	t.Run("ScanStops", func(t *testing.T) {
		s := open(t)
		MustCreate(t, s, "agt_a")
		MustAppend(t, s, "agt_a", 0, 5)
		stop := errors.New("enough")
		var seen []uint64
		err := s.Scan("agt_a", func(seq uint64, _ []byte) error {
			seen = append(seen, seq)
			if seq == 2 {
				return stop
			}
			return nil
		})
		if err != stop || !slices.Equal(seen, []uint64{0, 1, 2}) {
			t.Fatalf("Scan returned %v after %v, want the callback's error after 0,1,2", err, seen)
		}
	})

	t.Run("AppendDuringScan", func(t *testing.T) {
		s := open(t)
		MustCreate(t, s, "agt_a")
		MustAppend(t, s, "agt_a", 0, 3)
		n := 0
		err := s.Scan("agt_a", func(seq uint64, _ []byte) error {
			n++
			return s.Append("agt_a", 3+seq, Rec("agt_a", 3+seq))
		})
		if err != nil || n != 3 {
			t.Fatalf("Scan: %v after %d records, want 3 (a snapshot)", err, n)
		}
		WantLog(t, s, "agt_a", 6)
	})

	t.Run("ScanWhileAppending", func(t *testing.T) {
		s := open(t)
		MustCreate(t, s, "agt_a")
		const n = 200
		done := make(chan error, 1)
		go func() {
			for seq := uint64(0); seq < n; seq++ {
				if err := s.Append("agt_a", seq, Rec("agt_a", seq)); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		last := 0
		for finished := false; !finished; {
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				finished = true
			default:
			}
			k := 0
			err := s.Scan("agt_a", func(seq uint64, r []byte) error {
				if !bytes.Equal(r, Rec("agt_a", seq)) {
					return fmt.Errorf("record %d = %q", seq, r)
				}
				k++
				return nil
			})
			if err != nil || k < last {
				t.Fatalf("Scan: %d records after %d, %v", k, last, err)
			}
			last = k
		}
		WantLog(t, s, "agt_a", n)
	})

	t.Run("AgentsSorted", func(t *testing.T) {
		s := open(t)
		ids := []string{"b", "a.b", "a", "a-b", "a_b", "B", "a0"}
		for _, id := range ids {
			MustCreate(t, s, id)
		}
		got, err := s.Agents()
		slices.Sort(ids)
		if err != nil || !slices.Equal(got, ids) {
			t.Fatalf("Agents() = %q, %v; want %q", got, err, ids)
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		s := open(t)
		const agents, perAgent = 100, 40
		var wg sync.WaitGroup
		errs := make(chan error, agents)
		for a := range agents {
			wg.Go(func() {
				id := fmt.Sprintf("agt_%03d", a)
				if err := s.Create(id); err != nil {
					errs <- err
					return
				}
				rng := rand.New(rand.NewPCG(uint64(a), 1))
				for seq := uint64(0); seq < perAgent; {
					n := min(1+rng.IntN(3), perAgent-int(seq))
					recs := make([][]byte, n)
					for i := range recs {
						recs[i] = Rec(id, seq+uint64(i))
					}
					if err := s.Append(id, seq, recs...); err != nil {
						errs <- err
						return
					}
					seq += uint64(n)
					if rng.IntN(8) == 0 { // readers interleave with writers
						k := uint64(0)
						if err := s.Scan(id, func(uint64, []byte) error { k++; return nil }); err != nil || k != seq {
							errs <- fmt.Errorf("Scan(%s) mid-way: %d records, %v; want %d", id, k, err, seq)
							return
						}
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		ids, err := s.Agents()
		if err != nil || len(ids) != agents {
			t.Fatalf("Agents(): %d ids, %v", len(ids), err)
		}
		for _, id := range ids {
			WantLog(t, s, id, perAgent)
		}
	})

	t.Run("Closed", func(t *testing.T) {
		s := newStore(t)
		MustCreate(t, s, "agt_a")
		MustAppend(t, s, "agt_a", 0, 1)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		checks := map[string]error{
			"Create": s.Create("agt_b"),
			"Append": s.Append("agt_a", 1, Rec("agt_a", 1)),
			"Scan":   s.Scan("agt_a", func(uint64, []byte) error { return nil }),
			"Close":  s.Close(),
		}
		_, checks["Agents"] = s.Agents()
		for name, err := range checks {
			if !errors.Is(err, c.ErrClosed) {
				t.Errorf("%s after Close: %v, want ErrClosed", name, err)
			}
		}
	})
}
