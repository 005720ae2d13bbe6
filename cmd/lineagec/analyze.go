package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage/compiler/analyze"
)

type analyzeParams struct {
	format string
}

func newAnalyzeCmd(g *globalParams) *cobra.Command {
	var p analyzeParams
	cmd := &cobra.Command{
		Use:   "analyze FILE",
		Short: "State what a policy can never let an agent exceed",
		Long: `Analyze states, from the policy document alone, what no agent under it can
ever exceed (docs/authoring.md#bounds): the most credits it can spend; per tool
the most calls, the most credits and whether each call needs a person; how many
calls of unlisted tools end the agent; the least time in which it can spend
what it can under the rate limit; and findings for a reviewer. CEL constraints
and Rego extensions only deny, so the bounds hold whatever they say.
--format json prints {max_spend, tools, default_rule,
unlisted_attempts_to_termination, min_seconds_to_exhaust, findings}, null
where unbounded.
` + exitCodesHelp + `
analyze exits 0 for a valid policy (findings or not), 1 for an invalid one.`,
		Args: argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runAnalyze(p, args[0], cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	addFormatFlag(cmd, &p.format, formatText, formatJSON)
	return cmd
}

func runAnalyze(p analyzeParams, file string, stdout, stderr io.Writer) error {
	if err := checkFormat(p.format, formatText, formatJSON); err != nil {
		return err
	}
	r := compileFile(file)
	if !r.Valid {
		return invalidPolicy(r, stderr)
	}
	rep := analyze.Analyze(r.compiled.Policy)
	if p.format == formatJSON {
		return writeJSONIndent(stdout, rep)
	}
	writeAnalysisText(stdout, file, r.compiled.Policy.Budget, rep)
	return nil
}

func writeAnalysisText(w io.Writer, file string, budget int64, rep analyze.Report) {
	fmt.Fprintf(w, "%s\n", file)
	fmt.Fprintf(w, "  max spend: %d of a budget of %d credits\n", rep.MaxSpend, budget)
	names := make([]string, 0, len(rep.Tools))
	for name := range rep.Tools {
		names = append(names, name)
	}
	sort.Strings(names)
	if len(names) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  tool\tmax calls\tmax credits\tapproval\treachable")
		for _, name := range names {
			t := rep.Tools[name]
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%s\n", name, orUnbounded(t.MaxCalls), t.MaxCredits, yesNo(t.RequiresApproval), yesNo(t.Reachable))
		}
		tw.Flush()
	}
	if rep.DefaultRule {
		fmt.Fprintln(w, "  unlisted tools: admitted by default_rule")
	} else {
		fmt.Fprintf(w, "  unlisted tools: denied; attempt %d terminates the agent\n", *rep.UnlistedAttemptsToTermination)
	}
	fmt.Fprintf(w, "  least time to spend %d credits: %ss\n", rep.MaxSpend, orUnbounded(rep.MinSecondsToExhaust))
	if len(rep.Findings) == 0 {
		fmt.Fprintln(w, "  findings: none")
		return
	}
	fmt.Fprintf(w, "  findings: %d\n", len(rep.Findings))
	for _, f := range rep.Findings {
		fmt.Fprintf(w, "    %s: %s (%s)\n", f.Path, f.Message, f.Code)
	}
}

func orUnbounded(n *int64) string {
	if n == nil {
		return "unbounded"
	}
	return strconv.FormatInt(*n, 10)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
