// Package conformance owns lineage's conformance case format (docs/cases.md) and its
// runner: one loader and one runner serve `go test ./conformance/...`, the
// differential tests and `lineagec test`, for the suite under cases/ and for
// users' own suites.
//
// The runner wires the two halves of the pipeline (compiler → runtime) for each
// case; it holds no rules. The independent reference model that differential
// tests compare against lives in conformance/model.
package conformance
