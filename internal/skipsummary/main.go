// Command skipsummary is test.sh's filter of `go test -json`: it prints what
// `go test` without -json prints (each package's result line, and the whole
// output of a test that fails), and at the end the tests that skipped, each
// with the reason it gave. Outside CI a test that needs a real part that is
// missing here (Chromium, PostgreSQL, npm packages) skips; without this list
// a run without them would look as green as a full one.
//
// Usage: go test -json ./... | go run ./internal/skipsummary [-summary FILE]
//
// -summary writes the list to FILE instead of the end of the output, for a
// script that prints it after its other steps.
//
// Its exit status is 0 unless it cannot read its input: the status of the
// tests is go test's (test.sh runs with pipefail).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

func main() {
	file := flag.String("summary", "", "write the list of skipped tests to `FILE` (default: the end of stdout)")
	flag.Parse()
	var summary io.Writer = os.Stdout
	if *file != "" {
		f, err := os.Create(*file)
		if err != nil {
			fmt.Fprintln(os.Stderr, "skipsummary:", err)
			os.Exit(1)
		}
		defer f.Close()
		summary = f
	}
	if err := filter(os.Stdin, os.Stdout, summary); err != nil {
		fmt.Fprintln(os.Stderr, "skipsummary:", err)
		os.Exit(1)
	}
}

// filter copies go test's plain output from the -json stream in to out, then
// lists the skipped tests on summary.
func filter(in io.Reader, out, summary io.Writer) error {
	type key struct{ pkg, test string }
	held := map[key][]string{} // a running test's output, shown only if it fails
	var skipped []string
	r := bufio.NewReader(in)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			var ev event
			if json.Unmarshal(line, &ev) != nil || ev.Action == "" {
				out.Write(line) // not an event: pass it on as it is
			} else if ev.Test == "" {
				// A package's own lines, less the PASS that go test
				// without -v does not show either.
				if (ev.Action == "output" || ev.Action == "build-output") && ev.Output != "PASS\n" {
					io.WriteString(out, ev.Output)
				}
			} else {
				k := key{ev.Package, ev.Test}
				switch ev.Action {
				case "output":
					held[k] = append(held[k], ev.Output)
				case "fail":
					for _, o := range held[k] {
						if !strings.HasPrefix(o, "=== ") {
							io.WriteString(out, o)
						}
					}
					delete(held, k)
				case "skip":
					skipped = append(skipped, ev.Package+" "+ev.Test+": "+reason(held[k]))
					delete(held, k)
				case "pass":
					delete(held, k)
				}
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if len(skipped) > 0 {
		fmt.Fprintf(summary, "\n%d tests skipped (outside CI a test whose real part is missing here skips; under CI=true it fails):\n", len(skipped))
		for _, s := range skipped {
			fmt.Fprintln(summary, "  "+s)
		}
	}
	return nil
}

// reason is what a skipped test printed, less the run and skip headers.
func reason(lines []string) string {
	var parts []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		parts = append(parts, t)
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	return strings.Join(parts, " ")
}
