package conformance

import (
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/internal/diag"
	"github.com/lineage-guard/lineage/internal/source"
	"github.com/lineage-guard/lineage/runtime"
)

// Genesis is the time of every case's genesis record; `at` counts from here (D9: conformance time).
var Genesis = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// File is one loaded case file.
type File struct {
	Path  string
	doc   *source.Document
	Cases []*Case
}

// Case is one scenario of a case file.
type Case struct {
	File        *File
	Index       int
	Name        string
	policyPtr   string // JSON pointer of the policy this case runs against; "" if none
	Steps       []Step
	ExpectState map[string]any // nil when absent
	CompileErr  *CompileErrorExpectation
}

// CompileErrorExpectation is expect_compile_error.
type CompileErrorExpectation struct {
	Path string `json:"path"`
	Code string `json:"code"`
}

// Step is one action of a case and what it must produce.
type Step struct {
	Index     int
	Request   *StepRequest
	Approve   *StepApproval
	Reject    *StepApproval
	Terminate *StepTerminate
	Expect    map[string]any // nil when absent
}

// StepRequest is a request step. Tool, ID and Args are the values as the
// file gives them, malformed ones included (a number as tool, args an
// array): the step then expects an error (docs/cases.md). ArgsJSON is args as JSON
// text, decoded as the CLI and the service decode it (D54: one decoder of request JSON text).
type StepRequest struct {
	Tool     any          `json:"tool"`
	ID       any          `json:"id"`
	Args     any          `json:"args"`
	ArgsJSON *string      `json:"args_json"`
	At       *json.Number `json:"at"`
}

// request is the step's request as the runtime takes it, or the error that
// refuses it before the runtime sees it.
func (r *StepRequest) request() (lineage.Request, error) {
	args := r.Args
	if r.ArgsJSON != nil {
		if r.Args != nil {
			return lineage.Request{}, fmt.Errorf("request step has both args and args_json")
		}
		m, err := runtime.ParseArgs(*r.ArgsJSON)
		if err != nil {
			return lineage.Request{}, err
		}
		args = m
	}
	return runtime.RequestOf(r.ID, r.Tool, args)
}

// StepApproval is an approve or reject step.
type StepApproval struct {
	Request string       `json:"request"`
	By      string       `json:"by"`
	At      *json.Number `json:"at"`
}

// StepTerminate is a kill-switch step.
type StepTerminate struct {
	By     string       `json:"by"`
	Reason string       `json:"reason"`
	At     *json.Number `json:"at"`
}

// ID is how a case is named in output and in skip.yaml: "<file>/<name>".
func (c *Case) ID() string { return c.File.Path + "/" + c.Name }

// IsPolicyDocument tells a policy file (top-level budget or tools) from a case
// file: walking a directory such as examples/ skips policy files beside their
// cases, while a case file with a typo still fails to load.
func IsPolicyDocument(doc *source.Document) bool {
	m, ok := doc.Value.(map[string]any)
	if !ok {
		return false
	}
	_, budget := m["budget"]
	_, tools := m["tools"]
	_, cases := m["cases"]
	return (budget || tools) && !cases
}

// loadFile reads and validates a case file; when not explicit (found by walking
// a directory), a policy document is skipped (skip == true). Problems in a
// policy inside the file are not load errors: they surface when the case
// compiles its policy (where a case may expect them), with pointers relative
// to that policy.
func loadFile(path string, explicit bool) (f *File, skip bool, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, false, diag.List{{Code: diag.CodeIO, Position: diag.Position{File: path}, Message: err.Error()}}
	}
	// A number a double does not hold inside a policy is the policy's
	// problem, reported when the case compiles it; the file's own numbers
	// (times to the nanosecond, expected values) are kept as written, and a
	// step's args reach the runtime as written, which refuses them as it
	// refuses a request's.
	doc, diags := source.LoadWith(path, data, source.LoadOptions{
		Defer: inPolicy,
		Exact: func(ptr string) bool { return !inPolicy(ptr) },
	})
	if len(diags) > 0 {
		return nil, false, diags
	}
	if !explicit && IsPolicyDocument(doc) {
		return nil, true, nil
	}
	var kept diag.List
	for _, d := range source.Validate(doc, "conformance") {
		if !inPolicy(d.Pointer) {
			kept = append(kept, d)
		}
	}
	if len(kept) > 0 {
		return nil, false, kept
	}
	f, err = decodeFile(path, doc)
	return f, false, err
}

// inPolicy tells whether a pointer lies inside a file's or a case's policy.
func inPolicy(ptr string) bool {
	parts := strings.Split(ptr, "/")
	switch {
	case len(parts) >= 2 && parts[1] == "policy":
		return true
	case len(parts) >= 4 && parts[1] == "cases" && parts[3] == "policy":
		return true
	}
	return false
}

func decodeFile(path string, doc *source.Document) (*File, error) {
	f := &File{Path: path, doc: doc}
	root, _ := doc.Value.(map[string]any)
	_, hasFilePolicy := root["policy"]
	cases, _ := root["cases"].([]any)
	names := map[string]bool{}
	var diags diag.List
	for i, raw := range cases {
		cm, _ := raw.(map[string]any)
		ptr := fmt.Sprintf("/cases/%d", i)
		c := &Case{File: f, Index: i}
		c.Name, _ = cm["name"].(string)
		if names[c.Name] {
			diags = append(diags, diag.Diagnostic{Code: diag.CodeSchema, Pointer: ptr + "/name", Position: doc.Pos(ptr + "/name"),
				Message: fmt.Sprintf("case name %q is used twice in this file", c.Name)})
		}
		names[c.Name] = true
		if _, ok := cm["policy"]; ok {
			c.policyPtr = ptr + "/policy"
		} else if hasFilePolicy {
			c.policyPtr = "/policy"
		}
		if v, ok := cm["expect_compile_error"]; ok {
			c.CompileErr = &CompileErrorExpectation{}
			if err := remarshal(v, c.CompileErr); err != nil {
				return nil, err
			}
		}
		if v, ok := cm["expect_state"].(map[string]any); ok {
			c.ExpectState = v
		}
		steps, _ := cm["steps"].([]any)
		for j, rs := range steps {
			sm, _ := rs.(map[string]any)
			s := Step{Index: j}
			var err error
			switch {
			case sm["request"] != nil:
				s.Request = &StepRequest{}
				err = remarshal(sm["request"], s.Request)
			case sm["approve"] != nil:
				s.Approve = &StepApproval{}
				err = remarshal(sm["approve"], s.Approve)
			case sm["reject"] != nil:
				s.Reject = &StepApproval{}
				err = remarshal(sm["reject"], s.Reject)
			case sm["terminate"] != nil:
				s.Terminate = &StepTerminate{}
				err = remarshal(sm["terminate"], s.Terminate)
			}
			if err != nil {
				sp := fmt.Sprintf("%s/steps/%d", ptr, j)
				diags = append(diags, diag.Diagnostic{Code: diag.CodeSchema, Pointer: sp, Position: doc.Pos(sp), Message: err.Error()})
			}
			if e, ok := sm["expect"].(map[string]any); ok {
				s.Expect = e
			}
			c.Steps = append(c.Steps, s)
		}
		if c.policyPtr == "" {
			diags = append(diags, diag.Diagnostic{Code: diag.CodeRequired, Pointer: ptr, Position: doc.Pos(ptr),
				Message: "case has no policy and the file gives no default policy"})
		}
		f.Cases = append(f.Cases, c)
	}
	if len(diags) > 0 {
		diags.Sort()
		return nil, diags
	}
	return f, nil
}

func remarshal(v any, into any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	return dec.Decode(into)
}

// atTime converts seconds after genesis, as written (json.Number text), to a
// time exactly: "59.999999999" is 59,999,999,999 ns, with no float rounding.
func atTime(n json.Number) (time.Time, error) {
	r, ok := new(big.Rat).SetString(string(n))
	if !ok || r.Sign() < 0 {
		return time.Time{}, fmt.Errorf("bad time %q: seconds after genesis, ≥ 0", n)
	}
	ns := new(big.Rat).Mul(r, big.NewRat(1_000_000_000, 1))
	if !ns.IsInt() {
		return time.Time{}, fmt.Errorf("time %q has more than nanosecond precision", n)
	}
	if !ns.Num().IsInt64() || Genesis.Add(time.Duration(ns.Num().Int64())).After(runtime.Latest) {
		// A time the runtime cannot hold is a malformed request (docs/decision-order.md, D50 (the times the guard holds)).
		return time.Time{}, fmt.Errorf("%w: time %q is after %s, the last the runtime holds",
			lineage.ErrBadRequest, n, runtime.Latest.Format(time.RFC3339Nano))
	}
	return Genesis.Add(time.Duration(ns.Num().Int64())), nil
}

// Discover lists the candidate case files under paths (files are taken as
// given; directories are walked for *.yaml, *.yml, *.json, skipping skip.yaml,
// npm's package.json and package-lock.json, hidden directories and
// node_modules), and the .rego files (tests and the modules they test).
func Discover(paths []string) (cases []Candidate, rego []string, err error) {
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			return nil, nil, err
		}
		if !info.IsDir() {
			if strings.HasSuffix(p, ".rego") {
				rego = append(rego, p)
			} else {
				cases = append(cases, Candidate{Path: p, Explicit: true})
			}
			continue
		}
		err = filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				// D289 (npm projects beside the cases): installed packages are not cases.
				if path != p && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
					return filepath.SkipDir
				}
				return nil
			}
			name := d.Name()
			switch {
			case name == "skip.yaml", name == "package.json", name == "package-lock.json":
			case path != p && strings.HasPrefix(name, "."):
				// Hidden files are skipped as hidden folders are: a
				// repository's .gitlab-ci.yml is no case file (D316 (a walk
				// skips hidden files)).
			case strings.HasSuffix(name, ".rego"):
				rego = append(rego, path)
			case strings.HasSuffix(name, ".yaml"), strings.HasSuffix(name, ".yml"), strings.HasSuffix(name, ".json"):
				cases = append(cases, Candidate{Path: path})
			}
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
	}
	return cases, rego, nil
}

// Candidate is a file that may hold cases; Explicit when the user named it.
type Candidate struct {
	Path     string
	Explicit bool
}
