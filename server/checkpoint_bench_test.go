package server_test

import (
	"fmt"
	"testing"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/policy"
	"github.com/lineage-guard/lineage/runtime"
)

// BenchmarkCheckpointHTTP is one GET …/checkpoint and one GET …/proof/{seq}
// through the real client on the file store, for logs of n records: after a
// request (the log grew: read, verified and signed again) and unchanged (the
// note kept), and a proof (the log read and verified each time) (D151).
func BenchmarkCheckpointHTTP(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			sign, _ := checkpointKeys(b)
			e := startWith(b, sign)
			// The log is written by a runtime of its own over the same store:
			// the server's runtime has not loaded the agent and reads it from the store.
			rt := runtime.Open(e.store, runtime.Options{
				Compile: func(doc []byte) (*policy.Compiled, error) { return compiler.Compile("", doc) },
			})
			c, err := compiler.Compile("", []byte(`{"budget": 1000000000, "tools": {"pay": {"cost": 1}}}`))
			if err != nil {
				b.Fatal(err)
			}
			agent, err := rt.CreateAgent(bg, c, runtime.CreateOptions{})
			if err != nil {
				b.Fatal(err)
			}
			for range n - 2 {
				if _, err := rt.Request(bg, agent, lineage.Request{Tool: "pay"}); err != nil {
					b.Fatal(err)
				}
			}
			b.Run("grown", func(b *testing.B) { // one request, then its checkpoint
				for b.Loop() {
					if _, err := e.admin.Request(bg, agent, lineage.Request{Tool: "pay"}); err != nil {
						b.Fatal(err)
					}
					if _, err := e.admin.Checkpoint(bg, agent); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("unchanged", func(b *testing.B) {
				for b.Loop() {
					if _, err := e.admin.Checkpoint(bg, agent); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("proof", func(b *testing.B) {
				for b.Loop() {
					if _, err := e.admin.Proof(bg, agent, uint64(n/2)); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
