package server

import (
	"bytes"
	"fmt"
	"testing"
)

// BenchmarkAgentTokenRing: the cost of checking an agent token made under
// the last key of a ring of n keys (every key is tried), D333 (the key ring).
func BenchmarkAgentTokenRing(b *testing.B) {
	for _, n := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			var ring [][]byte
			for range n {
				ring = append(ring, NewKey())
			}
			old, err := newAuthority(nil, ring[n-1])
			if err != nil {
				b.Fatal(err)
			}
			a, err := newAuthority(nil, bytes.Join(ring, nil))
			if err != nil {
				b.Fatal(err)
			}
			tok := old.agentToken("agt_0123456789abcdef")
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := a.principal(tok); !ok {
					b.Fatal("token refused")
				}
			}
		})
	}
}
