// Package lineage holds the plain types that every stage of the pipeline shares:
// requests, verdicts, log records and the folded state of an agent (docs/log.md, docs/decision-order.md, docs/decision-order.md#folded-state).
//
// It is a leaf: it imports nothing of lineage's and decides nothing. The compiler
// lives in package compiler, the decisions in the Rego it generates (package rego),
// the bookkeeping in package runtime, and the independent reference model in
// conformance/model; all of them speak these types.
package lineage
