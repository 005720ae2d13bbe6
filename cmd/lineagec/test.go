package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage/conformance"
)

type testParams struct {
	format    string
	junit     string
	coverage  bool
	failUnder float64
}

func newTestCmd(g *globalParams) *cobra.Command {
	var p testParams
	cmd := &cobra.Command{
		Use:   "test PATH...",
		Short: "Run conformance case files and Rego tests",
		Long: `Test runs every conformance case file (*.yaml, *.yml, *.json) and every Rego
*_test.rego under the paths (docs/cases.md), prints one line per case (PASS, FAIL
with the reasons below it, SKIP for known gaps listed in a directory's
skip.yaml) and ends with the line "N passed, N failed". --format json prints
the report as JSON; --junit FILE also writes it as JUnit XML.
--coverage also reports, for every policy the cases use, which outcomes its
cases reached (docs/cases.md#coverage): one line per policy with the
percentage, then each outcome not reached with its file:line; in JSON the
"coverage" member, in JUnit properties. --fail-under N (with --coverage)
fails the run below N percent.
` + exitCodesHelp + `
test exits 0 when every case passed, 1 when one failed or nothing ran.`,
		Args: argsUsage(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTest(cmd.Context(), p, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	addFormatFlag(cmd, &p.format, formatText, formatJSON)
	cmd.Flags().StringVar(&p.junit, "junit", "", "also write the report as JUnit XML to this file")
	cmd.Flags().BoolVar(&p.coverage, "coverage", false, "report which outcomes of each policy the cases reached")
	cmd.Flags().Float64Var(&p.failUnder, "fail-under", 0, "with --coverage: exit 1 when the coverage is below this percentage")
	return cmd
}

func runTest(ctx context.Context, p testParams, paths []string, stdout, _ io.Writer) error {
	if err := checkFormat(p.format, formatText, formatJSON); err != nil {
		return err
	}
	if p.failUnder != 0 && !p.coverage {
		return fmt.Errorf("--fail-under needs --coverage")
	}
	if p.failUnder < 0 || p.failUnder > 100 {
		return fmt.Errorf("--fail-under %v: want a percentage from 0 to 100", p.failUnder)
	}
	rep, err := conformance.RunPathsWith(ctx, paths, conformance.RunOptions{Coverage: p.coverage})
	if err != nil {
		return err
	}
	if p.format == formatJSON {
		if err := rep.WriteJSON(stdout); err != nil {
			return err
		}
	} else {
		rep.WriteText(stdout)
		if rep.Coverage != nil {
			rep.Coverage.WriteText(stdout)
		}
	}
	if p.junit != "" {
		if err := writeJUnit(rep, p.junit); err != nil {
			return err
		}
	}
	switch {
	case rep.Failed > 0:
		return &exitError{code: exitFailure}
	case rep.Passed == 0:
		return &exitError{code: exitFailure, err: fmt.Errorf("no test ran under %s", strings.Join(paths, ", "))}
	case rep.Coverage != nil && rep.Coverage.Percent < p.failUnder:
		return &exitError{code: exitFailure, err: fmt.Errorf("coverage %.1f%% is below --fail-under %v", rep.Coverage.Percent, p.failUnder)}
	}
	return nil
}

func writeJUnit(rep *conformance.Report, path string) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--junit: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("--junit: %w", cerr)
		}
	}()
	if err := rep.WriteJUnit(f); err != nil {
		return errors.Join(fmt.Errorf("--junit: writing %s", path), err)
	}
	return nil
}
