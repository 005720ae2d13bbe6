package store

import (
	"testing"

	"github.com/lineage-guard/lineage/runtime/store/storetest"
)

// The contract shared by every store lives in package storetest, so that other
// backends (runtime/store/postgres) run the same suite; these names keep this
// package's tests short.
var (
	rec        = storetest.Rec
	mustCreate = storetest.MustCreate
	mustAppend = storetest.MustAppend
	scanAll    = storetest.ScanAll
	wantLog    = storetest.WantLog
)

// contract is this package's sentinels and limits, as storetest needs them.
var contract = storetest.Contract{
	ErrExists: ErrExists, ErrNotFound: ErrNotFound, ErrSeq: ErrSeq, ErrClosed: ErrClosed,
	ErrBadAgent: ErrBadAgent, ErrBadRecord: ErrBadRecord, MaxAgentID: MaxAgentID, MaxRecord: MaxRecord,
	Lists: &storetest.Lists{Agents: listAgentRows, Pending: listPendingRows},
}

// listAgentRows and listPendingRows read a page of a Lister for storetest.
func listAgentRows(s storetest.Store, cursor string, limit int, status string) (any, string, error) {
	return s.(Lister).ListAgents(ListQuery{Cursor: cursor, Limit: limit, Status: status})
}

func listPendingRows(s storetest.Store, cursor string, limit int) (any, string, error) {
	return s.(Lister).ListPending(ListQuery{Cursor: cursor, Limit: limit})
}

// testStore runs the Store contract against stores made by newStore.
func testStore(t *testing.T, newStore func(t *testing.T) Store) {
	storetest.Run(t, contract, func(t *testing.T) storetest.Store { return newStore(t) })
}
