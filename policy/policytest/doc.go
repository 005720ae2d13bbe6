// Package policytest makes policies for tests and benchmarks: large ones
// (ManyTools) and seeded random ones (Random), the one generator of the
// differential test against the reference model (conformance) and of the
// replay property test (replay). It is imported by tests only.
package policytest
