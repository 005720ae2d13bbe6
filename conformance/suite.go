package conformance

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/tester"

	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/internal/source"
	lineagerego "github.com/lineage-guard/lineage/rego"
)

// Report is the outcome of a run over case files and Rego tests.
type Report struct {
	Results []Result `json:"results"`
	Passed  int      `json:"passed"`
	Failed  int      `json:"failed"`
	Skipped int      `json:"skipped"`
	// Coverage is set when the run was asked for it (RunOptions.Coverage).
	Coverage *Coverage `json:"coverage,omitempty"`
}

// RunOptions are the options of RunPathsWith.
type RunOptions struct {
	// Coverage: report which outcomes of each policy the cases reached
	// (docs/cases.md#coverage).
	Coverage bool
}

func (r *Report) add(res Result) {
	r.Results = append(r.Results, res)
	switch res.Status {
	case "pass":
		r.Passed++
	case "skip":
		r.Skipped++
	default:
		r.Failed++
	}
}

// OK tells whether nothing failed (and something ran).
func (r *Report) OK() bool { return r.Failed == 0 && r.Passed > 0 }

// SkipFile is the name of the known-gaps file looked up in each directory given
// to RunPaths: a map from "<file relative to it>/<case name>" to the reason.
const SkipFile = "skip.yaml"

// RunPaths runs every case file and every Rego test under paths. A file that
// does not load counts as one failure named after the file.
func RunPaths(ctx context.Context, paths []string) (*Report, error) {
	return RunPathsWith(ctx, paths, RunOptions{})
}

// RunPathsWith is RunPaths with options.
func RunPathsWith(ctx context.Context, paths []string, o RunOptions) (*Report, error) {
	var cov *coverageSink
	if o.Coverage {
		cov = newCoverageSink()
	}
	cands, regoFiles, err := Discover(paths)
	if err != nil {
		return nil, err
	}
	skips, err := loadSkips(paths)
	if err != nil {
		return nil, err
	}
	rep := &Report{}
	for _, cand := range cands {
		f, skip, err := loadFile(cand.Path, cand.Explicit)
		if skip {
			continue
		}
		if err != nil {
			rep.add(Result{ID: cand.Path, File: cand.Path, Name: "(load)", Status: "fail",
				Failures: []string{"the file does not load:\n" + indent(err.Error())}})
			continue
		}
		for _, c := range f.Cases {
			if reason, ok := skips[filepath.Clean(c.File.Path)+"/"+c.Name]; ok {
				rep.add(Result{ID: c.ID(), File: c.File.Path, Name: c.Name, Status: "skip", Reason: reason})
				continue
			}
			rep.add(c.run1(ctx, cov))
		}
	}
	if cov != nil {
		if rep.Coverage, err = cov.report(ctx); err != nil {
			return nil, err
		}
	}
	if len(regoFiles) > 0 {
		results, err := runRegoTests(ctx, regoFiles)
		if err != nil {
			rep.add(Result{ID: "rego", Name: "(rego tests)", Status: "fail", Failures: []string{err.Error()}})
		}
		for _, r := range results {
			rep.add(r)
		}
	}
	return rep, nil
}

// loadSkips reads skip.yaml from each directory among paths.
func loadSkips(paths []string) (map[string]string, error) {
	out := map[string]string{}
	for _, p := range paths {
		if info, err := os.Stat(p); err != nil || !info.IsDir() {
			continue
		}
		file := filepath.Join(p, SkipFile)
		data, err := os.ReadFile(file)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		doc, diags := source.Load(file, data)
		if len(diags) > 0 {
			return nil, diags
		}
		m, ok := doc.Value.(map[string]any)
		if !ok && doc.Value != nil {
			return nil, fmt.Errorf("%s: must map \"<file>/<case name>\" to a reason", file)
		}
		for k, v := range m {
			reason, ok := v.(string)
			if !ok || strings.TrimSpace(reason) == "" {
				return nil, fmt.Errorf("%s: %q: the reason must be a non-empty string", file, k)
			}
			out[filepath.Join(p, k)] = reason
		}
	}
	return out, nil
}

// runRegoTests runs *_test.rego files with OPA's tester, together with the
// other .rego files found beside them and lineage's library, with lineage's
// builtins declared (stock `opa test` cannot see them).
func runRegoTests(ctx context.Context, files []string) ([]Result, error) {
	modules := map[string]*ast.Module{}
	hasTests := false
	for _, m := range lineagerego.Library() {
		mod, err := ast.ParseModuleWithOpts(m.Name, m.Source, ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			return nil, err
		}
		modules[m.Name] = mod
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		mod, err := ast.ParseModuleWithOpts(f, string(src), ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			return nil, err
		}
		modules[f] = mod
		hasTests = hasTests || strings.HasSuffix(f, "_test.rego")
	}
	if !hasTests {
		return nil, nil
	}
	stub := rego.Function2(compiler.CELFunction, func(rego.BuiltinContext, *ast.Term, *ast.Term) (*ast.Term, error) {
		return nil, fmt.Errorf("%s evaluates a compiled policy's CEL constraints; in a Rego unit test, mock it with `with %s as …`",
			compiler.CELFunction.Name, compiler.CELFunction.Name)
	})
	runner := tester.NewRunner().
		SetModules(modules).
		SetDefaultRegoVersion(ast.RegoV1).
		AddCustomBuiltins([]*tester.Builtin{{Decl: &ast.Builtin{Name: compiler.CELFunction.Name, Decl: compiler.CELFunction.Decl}, Func: stub}})
	ch, err := runner.RunTests(ctx, nil)
	if err != nil {
		return nil, err
	}
	var out []Result
	for r := range ch {
		name := r.Package + "." + r.Name
		res := Result{ID: name, File: r.Location.File, Name: name, Status: "pass", Duration: r.Duration.Seconds()}
		switch {
		case r.Error != nil:
			res.Status, res.Failures = "fail", []string{"error: " + r.Error.Error()}
		case r.Fail:
			res.Status, res.Failures = "fail", []string{"the test rule is false or undefined"}
		case r.Skip:
			res.Status, res.Reason = "skip", "todo_ test"
		}
		out = append(out, res)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// WriteText prints one line per case (PASS/FAIL/SKIP), the failures under each
// failed case, and ends with the line "N passed, N failed".
func (r *Report) WriteText(w io.Writer) {
	for _, res := range r.Results {
		switch res.Status {
		case "pass":
			fmt.Fprintf(w, "PASS %s\n", res.ID)
		case "skip":
			fmt.Fprintf(w, "SKIP %s (%s)\n", res.ID, res.Reason)
		default:
			fmt.Fprintf(w, "FAIL %s\n", res.ID)
			for _, f := range res.Failures {
				fmt.Fprintln(w, indent(f))
			}
		}
	}
	if r.Skipped > 0 {
		fmt.Fprintf(w, "%d passed, %d failed, %d skipped\n", r.Passed, r.Failed, r.Skipped)
		return
	}
	fmt.Fprintf(w, "%d passed, %d failed\n", r.Passed, r.Failed)
}

// WriteJSON prints the report as one JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteJUnit writes the report as JUnit XML, one testsuite per file.
func (r *Report) WriteJUnit(w io.Writer) error {
	type failure struct {
		Message string `xml:"message,attr"`
		Text    string `xml:",chardata"`
	}
	type skipped struct {
		Message string `xml:"message,attr"`
	}
	type testcase struct {
		Name      string   `xml:"name,attr"`
		Classname string   `xml:"classname,attr"`
		Time      string   `xml:"time,attr"`
		Failure   *failure `xml:"failure,omitempty"`
		Skipped   *skipped `xml:"skipped,omitempty"`
	}
	type property struct {
		Name  string `xml:"name,attr"`
		Value string `xml:"value,attr"`
	}
	type testsuite struct {
		Name       string      `xml:"name,attr"`
		Tests      int         `xml:"tests,attr"`
		Failures   int         `xml:"failures,attr"`
		Skipped    int         `xml:"skipped,attr"`
		Properties *[]property `xml:"properties>property,omitempty"`
		Cases      []testcase  `xml:"testcase"`
	}
	type testsuites struct {
		XMLName xml.Name    `xml:"testsuites"`
		Suites  []testsuite `xml:"testsuite"`
	}
	index := map[string]int{}
	var out testsuites
	for _, res := range r.Results {
		i, ok := index[res.File]
		if !ok {
			i = len(out.Suites)
			index[res.File] = i
			out.Suites = append(out.Suites, testsuite{Name: res.File})
		}
		s := &out.Suites[i]
		tc := testcase{Name: res.Name, Classname: res.File, Time: fmt.Sprintf("%.3f", res.Duration)}
		s.Tests++
		switch res.Status {
		case "fail":
			s.Failures++
			tc.Failure = &failure{Message: "failed", Text: strings.Join(res.Failures, "\n")}
		case "skip":
			s.Skipped++
			tc.Skipped = &skipped{Message: res.Reason}
		}
		s.Cases = append(s.Cases, tc)
	}
	if r.Coverage != nil {
		// Each file's suite carries the coverage of the policies it holds and
		// of the whole run (docs/cases.md#coverage).
		for i := range out.Suites {
			props := []property{{Name: "coverage", Value: fmt.Sprintf("%.1f", r.Coverage.Percent)}}
			for _, p := range r.Coverage.Policies {
				if p.File == out.Suites[i].Name {
					props = append(props, property{Name: fmt.Sprintf("coverage.%s:%d", p.File, p.line), Value: fmt.Sprintf("%.1f", p.Percent)})
				}
			}
			out.Suites[i].Properties = &props
		}
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(out); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
