package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/internal/diag"
	"github.com/lineage-guard/lineage/policy"
)

type checkParams struct {
	format string
}

func newCheckCmd(g *globalParams) *cobra.Command {
	var p checkParams
	cmd := &cobra.Command{
		Use:   "check FILE...",
		Short: "Validate policy files",
		Long: `Check compiles each policy file (JSON or YAML) and prints every problem found,
one per line as "file:line:col: /json/pointer: message (code)", files in the
order given, or "FILE: ok (sha256:…)" for a valid policy, with its digest.
--format json prints one JSON array of {file, valid, digest, diagnostics}.
` + exitCodesHelp + `
check exits 0 when every file is valid, 1 otherwise.`,
		Args: argsUsage(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCheck(p, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	addFormatFlag(cmd, &p.format, formatText, formatJSON)
	return cmd
}

// fileResult is the outcome of compiling one policy file.
type fileResult struct {
	File        string    `json:"file"`
	Valid       bool      `json:"valid"`
	Digest      string    `json:"digest,omitempty"`
	Diagnostics diag.List `json:"diagnostics"`

	compiled *policy.Compiled
}

func runCheck(p checkParams, files []string, stdout, stderr io.Writer) error {
	if err := checkFormat(p.format, formatText, formatJSON); err != nil {
		return err
	}
	results := make([]fileResult, len(files))
	invalid := 0
	for i, file := range files {
		results[i] = compileFile(file)
		if !results[i].Valid {
			invalid++
		}
	}
	if p.format == formatJSON {
		if err := writeJSONIndent(stdout, results); err != nil {
			return err
		}
	} else {
		for _, r := range results {
			writeResultText(stdout, r)
		}
	}
	if invalid > 0 {
		return &exitError{code: exitFailure, err: fmt.Errorf("%d of %d policy files are invalid", invalid, len(files))}
	}
	return nil
}

// compileFile compiles one policy file; diagnostics without a file name get
// this one, so that every line of a multi-file check says where it belongs.
func compileFile(file string) fileResult {
	c, err := compiler.CompileFile(file)
	if err == nil {
		return fileResult{File: file, Valid: true, Digest: c.Digest, Diagnostics: diag.List{}, compiled: c}
	}
	var list diag.List
	if !errors.As(err, &list) {
		list = diag.List{{Code: "error", Message: err.Error()}}
	}
	out := make(diag.List, len(list))
	for i, d := range list {
		if d.File == "" {
			d.File = file
		}
		out[i] = d
	}
	return fileResult{File: file, Diagnostics: out}
}

// writeResultText prints "FILE: ok (digest)" or one line per diagnostic.
func writeResultText(w io.Writer, r fileResult) {
	if r.Valid {
		fmt.Fprintf(w, "%s: ok (%s)\n", r.File, r.Digest)
		return
	}
	for _, d := range r.Diagnostics {
		fmt.Fprintln(w, d.String())
	}
}

// invalidPolicy is the error of a command that needed a valid policy: the
// diagnostics go to stderr, one per line, then the summary.
func invalidPolicy(r fileResult, stderr io.Writer) error {
	if err := unreadable(r); err != nil {
		return err
	}
	writeResultText(stderr, r)
	n := len(r.Diagnostics)
	s := "s"
	if n == 1 {
		s = ""
	}
	return &exitError{code: exitFailure, err: fmt.Errorf("%s: invalid policy (%d problem%s)", r.File, n, s)}
}

// unreadable is the error of a policy file that could not be read at all (a
// missing file is not an invalid policy), or nil: D301 (a missing file is
// not an invalid policy).
func unreadable(r fileResult) error {
	if len(r.Diagnostics) != 1 {
		return nil
	}
	d := r.Diagnostics[0]
	if d.Code != diag.CodeIO || d.Pointer != "" || d.Line != 0 || d.File != r.File {
		return nil
	}
	return &exitError{code: exitFailure, err: fmt.Errorf("cannot read %s: %s", r.File, strings.TrimPrefix(d.Message, "open "+r.File+": "))}
}
