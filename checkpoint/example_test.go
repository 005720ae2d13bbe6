package checkpoint_test

import (
	"encoding/json"
	"fmt"

	"github.com/lineage-guard/lineage/checkpoint"
)

// Example shows what a service calls: sign the latest checkpoint of a log
// (GET …/checkpoint serves the note bytes as text/plain) and prove one record
// (GET …/proof/{seq} serves the Proof as JSON); a client checks both.
func Example() {
	recs, err := buildLog("agt_example", "read", "pay", "read") // a verified log: runtime.Records
	if err != nil {
		panic(err)
	}

	skey, vkey, _ := checkpoint.GenerateKey("guard")
	signer, _ := checkpoint.NewSigner(skey) // the service's --checkpoint-key file
	note, _ := checkpoint.SignRecords(recs, signer)
	proof, _ := checkpoint.InclusionProof(recs, 3, 0) // 0: the whole log
	body, _ := json.Marshal(proof)

	// The client side.
	verifier, _ := checkpoint.NewVerifier(vkey)
	c, err := checkpoint.Open(note, verifier)
	fmt.Println(c.Origin(), c.Size, err)
	var p checkpoint.Proof
	_ = json.Unmarshal(body, &p)
	fmt.Println("record", p.Seq, "of", p.Size, "included:", p.Verify(c) == nil)
	// Output:
	// lineage/agt_example 5 <nil>
	// record 3 of 5 included: true
}
