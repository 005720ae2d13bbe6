package bench

// The workload's three policies. The invoice policy is the product note's, with
// two changes so that one agent can run a long mix without dying of it: the
// scar limit and budget are raised (a realistic mix includes denials, and
// denials scar). Everything else — tools, costs, caps, approval, rate limit —
// is the note's.
const invoicePolicy = `
name: invoice agent (bench)
budget: 100000000
scar_limit: 100000000
rate_limit: {max_actions: 60, window_secs: 60}
tools:
  llm_turn: {cost: 0, max_calls: 60}
  read_invoice: {cost: 0}
  pay_invoice: {cost: 1, requires_approval: true, max_calls: 10}
`

const celPolicy = `
name: payments with CEL constraints (bench)
budget: 100000000
scar_limit: 100000000
rate_limit: {max_actions: 60, window_secs: 60}
tools:
  read_invoice: {cost: 0}
  pay_invoice:
    cost: 1
    when:
      - {expr: "args.amount <= 5000", reason: amount_over_limit, scar: moderate}
      - {expr: "args.currency in ['EUR', 'USD']", reason: currency_not_allowed, scar: minor}
  wire:
    cost: 5
    requires_approval: true
    when:
      - {expr: "args.amount <= 100000", reason: wire_too_large}
`

const extPolicy = `
name: mail agent with a Rego extension (bench)
budget: 100000000
scar_limit: 100000000
rate_limit: {max_actions: 60, window_secs: 60}
tools:
  read_inbox: {cost: 0}
  send_email: {cost: 1}
  send_invoice: {cost: 1, requires_approval: true}
rego:
  - source: |
      package lineage.ext.mail

      allowed_domains := {"example.com", "partner.example"}

      deny contains {"reason": "recipient_domain_not_allowed", "scar": "moderate"} if {
        startswith(input.request.tool, "send_")
        parts := split(input.request.args.to, "@")
        not allowed_domains[parts[1]]
      }
`
