package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage/compiler"
)

type compileParams struct {
	out    string
	format string
}

func newCompileCmd(g *globalParams) *cobra.Command {
	var p compileParams
	cmd := &cobra.Command{
		Use:   "compile FILE -o DIR",
		Short: "Compile a policy to a directory of Rego modules",
		Long: `Compile compiles a policy file and writes it as a directory: the Rego modules
(lineage's library, the generated policy.rego and the extensions), the
normalized policy (policy.json) and manifest.json. DIR is replaced only if it
is empty or holds an earlier compiled policy; missing parent folders are
created (only once the policy is valid).

It prints "DIGEST  DIR"; --format json prints {digest, dir, modules}. An invalid
policy prints its diagnostics as check does (on stderr; with --format json, the
check object on stdout).
` + exitCodesHelp + `
compile exits 0 when the directory was written, 1 otherwise.`,
		Args: argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCompile(p, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVarP(&p.out, "output", "o", "", "directory to write (required)")
	_ = cmd.MarkFlagRequired("output")
	addFormatFlag(cmd, &p.format, formatText, formatJSON)
	return cmd
}

func runCompile(p compileParams, args []string, stdout, stderr io.Writer) error {
	if err := checkFormat(p.format, formatText, formatJSON); err != nil {
		return err
	}
	if p.out == "" {
		return fmt.Errorf("compile needs an output directory: -o DIR")
	}
	r := compileFile(args[0])
	if !r.Valid {
		if p.format == formatJSON {
			if err := writeJSONIndent(stdout, r); err != nil {
				return err
			}
			if err := unreadable(r); err != nil {
				return err
			}
			return &exitError{code: exitFailure, err: fmt.Errorf("%s: invalid policy", r.File)}
		}
		return invalidPolicy(r, stderr)
	}
	// WriteDir writes a sibling of DIR and renames it into place, so DIR's
	// parent must exist; a user naming -o build/invoice expects it made.
	if err := os.MkdirAll(filepath.Dir(filepath.Clean(p.out)), 0o755); err != nil {
		return fmt.Errorf("writing %s: %w", p.out, err)
	}
	if err := compiler.WriteDir(r.compiled, p.out); err != nil {
		return fmt.Errorf("writing %s: %w", p.out, err)
	}
	if p.format == formatJSON {
		modules := make([]string, len(r.compiled.Modules))
		for i, m := range r.compiled.Modules {
			modules[i] = m.Name
		}
		return writeJSONIndent(stdout, struct {
			Digest  string   `json:"digest"`
			Dir     string   `json:"dir"`
			Modules []string `json:"modules"`
		}{r.Digest, p.out, modules})
	}
	_, err := fmt.Fprintf(stdout, "%s  %s\n", r.Digest, p.out)
	return err
}
