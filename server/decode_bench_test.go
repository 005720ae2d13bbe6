package server

import "testing"

// BenchmarkDecodeRequestBody: reading one typical request body, all checks
// included (the strict reader's one pass).
func BenchmarkDecodeRequestBody(b *testing.B) {
	body := []byte(`{"id":"r-1","tool":"pay","args":{"amount":12.5,"to":"alice@example.com","memo":"invoice 42","items":[1,2,3],"meta":{"k":"v","n":null,"ok":true}}}`)
	b.ReportAllocs()
	for b.Loop() {
		var v requestBody
		if err := decodeJSON(body, &v); err != nil {
			b.Fatal(err)
		}
	}
}
