package compiler_test

import (
	"fmt"

	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/policy"
)

// invoiceYAML is a policy file's text: two tools, one that needs a person.
const invoiceYAML = `budget: 100
tools:
  read_invoice: { cost: 0 }
  pay_invoice:  { cost: 1, requires_approval: true }
`

// Example compiles a policy file's text into the policy with every default
// filled in (scar_limit 10 here). A mistake comes back as diagnostics, every
// one, each naming the file, line, column and JSON pointer.
func Example() {
	c, err := compiler.Compile("invoice.yaml", []byte(invoiceYAML))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(c.Policy.Budget, c.Policy.Tools["pay_invoice"].RequiresApproval, *c.Policy.ScarLimit)

	_, err = compiler.Compile("invoice.yaml", []byte(`budget: 100
tools:
  pay_invoice: { cots: 1 }
`))
	fmt.Println(err)
	// Output:
	// 100 true 10
	// invoice.yaml:3:3: /tools/pay_invoice: missing required field "cost" (required)
	// invoice.yaml:3:18: /tools/pay_invoice/cots: unknown field "cots" (did you mean "cost"?) (unknown_field)
}

// ExampleCompilePolicy compiles a policy built in Go: the same rules written
// in YAML compile to the same digest, so an agent's log does not tell them
// apart.
func ExampleCompilePolicy() {
	fromGo, err := compiler.CompilePolicy(policy.New(100).
		Allow("read_invoice", policy.Cost(0)).
		Allow("pay_invoice", policy.Cost(1).WithApproval()).
		Policy())
	if err != nil {
		fmt.Println(err)
		return
	}
	fromYAML, err := compiler.Compile("", []byte(invoiceYAML))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(fromGo.Digest == fromYAML.Digest)
	// Output:
	// true
}
