// Package runtime owns the second half of the pipeline: agents and their
// hash-chained logs, the fold of a log into state, the store behind it, and the
// OPA query that decides each request.
//
// It consumes a *policy.Compiled and never parses YAML or generates Rego
// itself: reopening a log hands its recorded policy to Options.Compile, the
// compiler's CompileRecorded unless the caller gives another. The
// rules of docs/decision-order.md steps 3–8 are decided by the compiled Rego; Go here does the
// bookkeeping around it: validating requests, idempotent retries and sealed logs
// (steps 1–2), building the input, appending records durably, and folding them
// into state with one function that both replay and live appends use.
package runtime
