package runtime

import (
	"testing"

	"github.com/lineage-guard/lineage"
)

// BenchmarkFoldDecodeAction is decoding one action record's body as a
// replay does (decodeBody), for D374 (action bodies read by the one reader).
func BenchmarkFoldDecodeAction(b *testing.B) {
	rec := lineage.Record{Kind: lineage.KindAction, Body: []byte(`{"request":{"args":{"amount":1250,"currency":"EUR","memo":"invoice 2026-118","to":"acme"},"id":"req_000123","tool":"pay"},"verdict":{"cost":2,"decision":"allow","reason":"ok","request_id":"req_000123","scar":null,"seq":123,"terminated":null}}`)}
	b.SetBytes(int64(len(rec.Body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := decodeBody(rec); err != nil {
			b.Fatal(err)
		}
	}
}
