package server_test

import (
	"fmt"
	"testing"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/checkpoint"
	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/server"
)

// BenchmarkCheckpointHTTP is one GET …/checkpoint and one GET …/proof/{seq}
// through the real client on the file store, for logs of n records, side by
// side with what the same answers cost before checkpoints were signed as
// logs grew (D151 (signed as logs grow, served from memory): the whole log read and strictly verified each time, done
// here in process, without HTTP):
//
//   - grown: one request, then its checkpoint (the GET waits for the new
//     record, verified strictly from the signed head, and its signature);
//   - before_grown: one request, then Runtime.Records and a signature;
//   - unchanged: the checkpoint again (served from memory);
//   - proof: the tree from the stored hashes (chain-checked), its root
//     compared with the signed one, the audit path;
//   - before_proof: Runtime.Records and checkpoint.InclusionProof.
func BenchmarkCheckpointHTTP(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			sign, _ := checkpointKeys(b)
			var signer server.Config
			sign(&signer)
			e := startWith(b, sign)
			// The log is written by a runtime of its own over the same store:
			// the server's runtime has not loaded the agent and reads it from the store.
			rt := runtime.Open(e.store, runtime.Options{})
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
			// The server meets the log once (verified from genesis) and its
			// runtime opens the agent, untimed.
			if _, err := e.admin.Checkpoint(bg, agent); err != nil {
				b.Fatal(err)
			}
			if _, err := e.admin.Request(bg, agent, lineage.Request{Tool: "pay"}); err != nil {
				b.Fatal(err)
			}
			b.Run("grown", func(b *testing.B) {
				for b.Loop() {
					if _, err := e.admin.Request(bg, agent, lineage.Request{Tool: "pay"}); err != nil {
						b.Fatal(err)
					}
					if _, err := e.admin.Checkpoint(bg, agent); err != nil {
						b.Fatal(err)
					}
				}
			})
			// The server's own runtime over the store reads what it wrote.
			srt := runtime.Open(e.store, runtime.Options{})
			b.Run("before_grown", func(b *testing.B) {
				for b.Loop() {
					if _, err := e.admin.Request(bg, agent, lineage.Request{Tool: "pay"}); err != nil {
						b.Fatal(err)
					}
					recs, err := srt.Records(agent)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := checkpoint.SignRecords(recs, signer.CheckpointSigner); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("unchanged", func(b *testing.B) {
				if _, err := e.admin.Checkpoint(bg, agent); err != nil {
					b.Fatal(err)
				}
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
			b.Run("before_proof", func(b *testing.B) {
				for b.Loop() {
					recs, err := srt.Records(agent)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := checkpoint.InclusionProof(recs, uint64(n/2), 0); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkRequestCheckpointKey is the request path through the real client
// on the file store, without a checkpoint key and with one (every request
// then makes the server sign, coalesced, off the request path: D200 (signed as logs grow)), side
// by side.
func BenchmarkRequestCheckpointKey(b *testing.B) {
	policy := []byte(`{"budget": 1000000000, "tools": {"pay": {"cost": 1}}}`)
	for _, key := range []bool{false, true} {
		name := "key=none"
		var edit func(*server.Config)
		if key {
			name = "key=signing"
			edit, _ = checkpointKeys(b)
		}
		b.Run(name, func(b *testing.B) {
			e := startWith(b, edit)
			c, err := e.admin.CreateAgent(bg, policy, "bot", "")
			if err != nil {
				b.Fatal(err)
			}
			bot := e.client(c.Token)
			if _, err := bot.Request(bg, c.Agent, lineage.Request{Tool: "pay"}); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := bot.Request(bg, c.Agent, lineage.Request{Tool: "pay"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
