package runtime

import (
	"encoding/json"
	"time"

	"github.com/lineage-guard/lineage/runtime/internal/index"
	"github.com/lineage-guard/lineage/runtime/store"
)

// The lists of the service, the inbox and the CLI: one page at a time from
// the store's indexes (docs/service.md: lists scale with what they return,
// not with the store). Listing loads no agent: the rows are the index's,
// never the fold's, and nothing decides from them.

// AgentRow is one agent of a page of ListAgents.
type AgentRow = store.AgentRow

// PendingRow is one pending request of a page of ListPending: its args
// decoded, its time parsed.
type PendingRow struct {
	Agent     string
	Name      string
	RequestID string
	Tool      string
	Args      map[string]any
	At        time.Time
	Cost      int64
	Seq       uint64
}

// ListQuery asks for a page: a cursor from the page before ("" first), at
// most Limit rows (store.DefaultListLimit if 0, at most
// store.MaxListLimit), and for agents a status ("" any).
type ListQuery = store.ListQuery

// ListAgents returns one page of agents, in the order of their ids, and the
// cursor of the next page ("" after the last).
func (r *Runtime) ListAgents(q ListQuery) ([]AgentRow, string, error) {
	return listing(r.store).ListAgents(q)
}

// ListPending returns one page of the pending requests of every agent, by
// agent id then seq, and the cursor of the next page.
func (r *Runtime) ListPending(q ListQuery) ([]PendingRow, string, error) {
	rows, next, err := listing(r.store).ListPending(q)
	if err != nil {
		return nil, "", err
	}
	out := make([]PendingRow, 0, len(rows))
	for _, p := range rows {
		row := PendingRow{Agent: p.Agent, Name: p.Name, RequestID: p.RequestID, Tool: p.Tool, Cost: p.Cost, Seq: p.Seq}
		if len(p.Args) > 0 {
			_ = json.Unmarshal(p.Args, &row.Args) // the action record's args: an object
		}
		if row.Args == nil {
			row.Args = map[string]any{}
		}
		row.At, _ = time.Parse(time.RFC3339Nano, p.At)
		out = append(out, row)
	}
	return out, next, nil
}

// listing returns st's store.Lister; for a store that keeps no index (a
// wrapper in a test), one that reads every log for every page.
func listing(st store.Store) store.Lister {
	if l, ok := st.(store.Lister); ok {
		return l
	}
	return scanLister{st}
}

type scanLister struct{ st store.Store }

func (l scanLister) ListAgents(q store.ListQuery) ([]store.AgentRow, string, error) {
	x, err := index.Read(l.st)
	if err != nil {
		return nil, "", err
	}
	return x.ListAgents(q)
}

func (l scanLister) ListPending(q store.ListQuery) ([]store.PendingRow, string, error) {
	x, err := index.Read(l.st)
	if err != nil {
		return nil, "", err
	}
	return x.ListPending(q)
}
