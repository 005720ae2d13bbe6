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

// ExampleVerify is an auditor's later check: the bundle it kept (a signed
// checkpoint and the record list, lineagec checkpoint's file) against the
// log as it is now. A log that grew still holds every record the checkpoint
// signed; a log rewritten below it is named at its first changed record.
func ExampleVerify() {
	skey, vkey, _ := checkpoint.GenerateKey("guard")
	signer, _ := checkpoint.NewSigner(skey)
	then, _ := buildLog("agt_audit", "read", "pay") // the log when the bundle was kept
	note, _ := checkpoint.SignRecords(then, signer)
	kept := checkpoint.Bundle(note, then)

	verifier, _ := checkpoint.NewVerifier(vkey)
	signed, hashes, _ := checkpoint.Unbundle(kept)
	c, err := checkpoint.Open(signed, verifier)
	if err != nil {
		fmt.Println(err)
		return
	}
	grown, _ := buildLog("agt_audit", "read", "pay", "read")
	res := checkpoint.Verify(grown, c, hashes)
	fmt.Println(res.OK, res.Records, "records, the checkpoint's", res.Size)
	rewritten, _ := buildLog("agt_audit", "read", "read", "read")
	res = checkpoint.Verify(rewritten, c, hashes)
	fmt.Println(res.OK, "diverges at seq", *res.Seq)
	// Output:
	// true 5 records, the checkpoint's 4
	// false diverges at seq 3
}
