// Package compiler owns the first half of the pipeline: it loads a policy document
// (JSON or YAML, keeping positions), validates it against the published schema,
// normalizes it and computes its digest, type-checks its CEL constraints with
// cel-go, checks its Rego extensions, and generates the Rego module that the
// base library in package rego evaluates. Its output is one *policy.Compiled.
//
// It decides nothing at run time: the verdicts come from the Rego it generates.
// Every problem it finds is a diag.Diagnostic with a stable code, the JSON pointer
// and file:line:col; it reports all of them, sorted, never just the first.
package compiler
