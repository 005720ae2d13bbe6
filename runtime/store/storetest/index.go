package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// Lists reads one page of a store's indexes (store.Lister): the rows as
// store.Lister returns them (read here through their JSON, so that this
// package needs none of package store's types).
type Lists struct {
	Agents  func(s Store, cursor string, limit int, status string) (rows any, next string, err error)
	Pending func(s Store, cursor string, limit int) (rows any, next string, err error)
}

// agentLines and pendingLines render rows as lines of text:
// "agent name status digest seq" and "agent name request_id seq tool cost at args".
func agentLines(t testing.TB, rows any) []string {
	t.Helper()
	var rs []struct {
		Agent, Name, Status, Digest string
		Seq                         uint64
	}
	fromJSON(t, rows, &rs)
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s %s %s %s %d", r.Agent, r.Name, r.Status, r.Digest, r.Seq))
	}
	return out
}

func pendingLines(t testing.TB, rows any) []string {
	t.Helper()
	var rs []struct {
		Agent     string
		Name      string
		RequestID string `json:"request_id"`
		Seq       uint64
		Tool      string
		Cost      int64
		At        string
		Args      json.RawMessage
	}
	fromJSON(t, rows, &rs)
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s %s %s %d %s %d %s %s", r.Agent, r.Name, r.RequestID, r.Seq, r.Tool, r.Cost, r.At, r.Args))
	}
	return out
}

func fromJSON(t testing.TB, v, into any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err == nil {
		err = json.Unmarshal(b, into)
	}
	if err != nil {
		t.Fatalf("rows %T: %v", v, err)
	}
}

// Record kinds of LogRec, as docs/log.md names them.
const testAt = "2026-12-02T03:00:00Z"

// Genesis, Policy, Action, Approval and Termination are records shaped like
// a log's (hash and chain left out: the store does not check them).
func Genesis(agent, name string) []byte {
	return fmt.Appendf(nil, `{"at":%q,"body":{"agent":%q,"name":%q},"hash":"h","kind":"genesis","prev":"","seq":0}`, testAt, agent, name)
}

// Policy is a policy record whose tools cost as costs says ("default" is the
// default rule's cost).
func Policy(digest string, costs map[string]int64) []byte {
	var tools []string
	def := ""
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range costs {
			if !yield(k) {
				return
			}
		}
	}) {
		if k == "default" {
			def = fmt.Sprintf(`,"default_rule":{"cost":%d}`, costs[k])
			continue
		}
		tools = append(tools, fmt.Sprintf(`%q:{"cost":%d}`, k, costs[k]))
	}
	return fmt.Appendf(nil, `{"at":%q,"body":{"digest":%q,"policy":{"budget":100,"tools":{%s}%s}},"hash":"h","kind":"policy","prev":"h","seq":1}`,
		testAt, digest, strings.Join(tools, ","), def)
}

// Action is an action record of request id with the given decision.
func Action(seq uint64, id, tool, args, decision string) []byte {
	return fmt.Appendf(nil, `{"at":"2026-12-02T03:00:%02dZ","body":{"request":{"args":%s,"id":%q,"tool":%q},"verdict":{"cost":0,"decision":%q,"reason":"r","request_id":%q,"scar":null,"seq":%d,"terminated":null}},"hash":"h","kind":"action","prev":"h","seq":%d}`,
		seq%60, args, id, tool, decision, id, seq, seq)
}

// Approval decides request id.
func Approval(seq uint64, id string, approved bool) []byte {
	d := "deny"
	if approved {
		d = "allow"
	}
	return fmt.Appendf(nil, `{"at":%q,"body":{"approved":%t,"approver":"alice","request_id":%q,"verdict":{"cost":0,"decision":%q,"reason":"r","request_id":%q,"scar":null,"seq":%d,"terminated":null}},"hash":"h","kind":"approval","prev":"h","seq":%d}`,
		testAt, approved, id, d, id, seq, seq)
}

// Termination seals a log.
func Termination(seq uint64) []byte {
	return fmt.Appendf(nil, `{"at":%q,"body":{"by":"alice","reason":"killed"},"hash":"h","kind":"termination","prev":"h","seq":%d}`, testAt, seq)
}

// AllAgents reads every page of the agent index, limit rows at a time.
func AllAgents(t testing.TB, l *Lists, s Store, limit int, status string) []string {
	t.Helper()
	var out []string
	cursor := ""
	for range 10000 {
		page, next, err := l.Agents(s, cursor, limit, status)
		if err != nil {
			t.Fatalf("agents page after %q: %v", cursor, err)
		}
		rows := agentLines(t, page)
		if len(rows) > limit {
			t.Fatalf("a page of %d rows, limit %d", len(rows), limit)
		}
		out = append(out, rows...)
		if next == "" {
			return out
		}
		cursor = next
	}
	t.Fatal("the agent pages never end")
	return nil
}

// AllPending reads every page of the pending index.
func AllPending(t testing.TB, l *Lists, s Store, limit int) []string {
	t.Helper()
	var out []string
	cursor := ""
	for range 10000 {
		page, next, err := l.Pending(s, cursor, limit)
		if err != nil {
			t.Fatalf("pending page after %q: %v", cursor, err)
		}
		rows := pendingLines(t, page)
		if len(rows) > limit {
			t.Fatalf("a page of %d rows, limit %d", len(rows), limit)
		}
		out = append(out, rows...)
		if next == "" {
			return out
		}
		cursor = next
	}
	t.Fatal("the pending pages never end")
	return nil
}

// Fleet writes, through s, the logs that WantFleet checks: 12 agents,
// agt_00..agt_11; every third one terminated; agt_01 with three pending
// requests of which one is approved and one rejected; agt_04 with two
// pending; agt_03 with one pending then terminated (its pending requests
// leave the list).
func Fleet(t testing.TB, s Store) {
	t.Helper()
	app := func(agent string, first uint64, recs ...[]byte) {
		t.Helper()
		if err := s.Append(agent, first, recs...); err != nil {
			t.Fatalf("Append(%s, %d): %v", agent, first, err)
		}
	}
	for i := range 12 {
		a := fmt.Sprintf("agt_%02d", i)
		MustCreate(t, s, a)
		app(a, 0, Genesis(a, "n"+a), Policy("sha256:p", map[string]int64{"deploy": 7, "default": 2}))
		next := uint64(2)
		switch a {
		case "agt_01":
			app(a, 2, Action(2, "r1", "deploy", `{"env":"prod"}`, "pending"), Action(3, "r2", "read", `{}`, "allow"))
			app(a, 4, Action(4, "r3", "other", `{"n":1}`, "pending"), Action(5, "r4", "deploy", `{}`, "pending"))
			app(a, 6, Approval(6, "r1", true))
			app(a, 7, Approval(7, "r4", false))
			next = 8
		case "agt_04":
			app(a, 2, Action(2, "x", "deploy", `{}`, "pending"))
			app(a, 3, Action(3, "y", "deploy", `{}`, "pending"))
			next = 4
		case "agt_03":
			app(a, 2, Action(2, "z", "deploy", `{}`, "pending"))
			next = 3
		}
		if i%3 == 0 {
			app(a, next, Termination(next))
		}
	}
}

// WantFleet checks the indexes of a store that Fleet wrote.
func WantFleet(t testing.TB, l *Lists, s Store) {
	t.Helper()
	var want, dead []string
	for i := range 12 {
		a := fmt.Sprintf("agt_%02d", i)
		seq := map[string]int{"agt_00": 2, "agt_01": 7, "agt_03": 3, "agt_04": 3}[a]
		if seq == 0 {
			seq = 1
			if i%3 == 0 {
				seq = 2
			}
		}
		status := "alive"
		if i%3 == 0 {
			status = "terminated"
		}
		row := fmt.Sprintf("%s n%s %s sha256:p %d", a, a, status, seq)
		want = append(want, row)
		if status == "terminated" {
			dead = append(dead, row)
		}
	}
	for _, limit := range []int{1, 5, 12, 100} {
		if got := AllAgents(t, l, s, limit, ""); !slices.Equal(got, want) {
			t.Errorf("agents by %d:\n%s\nwant\n%s", limit, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	if got := AllAgents(t, l, s, 2, "terminated"); !slices.Equal(got, dead) {
		t.Errorf("terminated agents: %q, want %q", got, dead)
	}
	wantP := []string{
		`agt_01 nagt_01 r3 4 other 2 2026-12-02T03:00:04Z {"n":1}`,
		`agt_04 nagt_04 x 2 deploy 7 2026-12-02T03:00:02Z {}`,
		`agt_04 nagt_04 y 3 deploy 7 2026-12-02T03:00:03Z {}`,
	}
	for _, limit := range []int{1, 2, 3, 100} {
		if got := AllPending(t, l, s, limit); !slices.Equal(got, wantP) {
			t.Errorf("pending by %d:\n%s\nwant\n%s", limit, strings.Join(got, "\n"), strings.Join(wantP, "\n"))
		}
	}
}

func runIndex(t *testing.T, c Contract, open func(t *testing.T) Store) {
	l := c.Lists
	t.Run("IndexFleet", func(t *testing.T) {
		s := open(t)
		Fleet(t, s)
		WantFleet(t, l, s)
	})
	t.Run("IndexEmpty", func(t *testing.T) {
		s := open(t)
		if rows := AllAgents(t, l, s, 10, ""); len(rows) != 0 {
			t.Errorf("agents of an empty store: %q", rows)
		}
		if rows := AllPending(t, l, s, 10); len(rows) != 0 {
			t.Errorf("pending of an empty store: %q", rows)
		}
		MustCreate(t, s, "agt_new")
		if rows := AllAgents(t, l, s, 10, ""); len(rows) != 1 || !strings.HasPrefix(rows[0], "agt_new  alive") {
			t.Errorf("agents after a create: %q", rows)
		}
	})
	t.Run("IndexBadQuery", func(t *testing.T) {
		s := open(t)
		if _, _, err := l.Agents(s, "!!", 10, ""); err == nil {
			t.Error("a cursor no page gave was taken")
		}
		if _, _, err := l.Agents(s, "", 1001, ""); err == nil {
			t.Error("limit 1001 was taken")
		}
		if _, _, err := l.Agents(s, "", 10, "sleeping"); err == nil {
			t.Error("status sleeping was taken")
		}
		if _, _, err := l.Pending(s, "", -1); err == nil {
			t.Error("limit -1 was taken")
		}
	})
	t.Run("IndexRejectedAppend", func(t *testing.T) {
		// An append the store refuses changes nothing in the indexes.
		s := open(t)
		MustCreate(t, s, "agt_a")
		if err := s.Append("agt_a", 0, Genesis("agt_a", "a"), Policy("sha256:p", nil)); err != nil {
			t.Fatal(err)
		}
		if err := s.Append("agt_a", 5, Action(5, "r", "t", `{}`, "pending")); err == nil {
			t.Fatal("an append at the wrong seq was taken")
		}
		if rows := AllPending(t, l, s, 10); len(rows) != 0 {
			t.Errorf("pending after a refused append: %q", rows)
		}
	})
}
