package file

import (
	"testing"

	"github.com/lineage-guard/lineage/runtime/store"
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

// testStore runs the Store contract against stores made by newStore.
func testStore(t *testing.T, newStore func(t *testing.T) store.Store) {
	storetest.Run(t, storetest.Default, func(t *testing.T) storetest.Store { return newStore(t) })
}
