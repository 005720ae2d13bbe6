package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/replay"
)

type replayParams struct {
	*globalParams
	policy, format string
	all            bool
}

func newReplayCmd(g *globalParams) *cobra.Command {
	p := replayParams{globalParams: g}
	cmd := &cobra.Command{
		Use:   "replay AGENT|FILE... --policy NEW.yaml",
		Short: "Re-decide a log's requests under another policy (shadow mode)",
		Long: `Replay re-decides a log's requests in order, at their recorded times, with
its approvals, rejections and kills as recorded, under the policy NEW, by the
same engine as the guard, and reports each act whose verdict would differ:
what a successor policy would have done on what really happened, before the
successor agent exists. Nothing is written: the log and the data directory are
only read.

The table lists the acts that differ, marked *, (--all: every act) and ends with a
summary: how many requests' outcomes differ (an outcome is the verdict of a
request's approval or rejection if the log has one, else its own), how many
allowed would be denied, and the reverse. An approval of a request that NEW
does not leave pending, or any act after NEW has terminated the agent, is
reported, not an error. --format json prints the whole report.

Several logs (agents or files) are replayed under the same NEW side by side,
one log per core: the table shows each log's block, then a line with the
totals; --format json prints an array of the reports, in the order given
(a single log prints its report alone).
` + exitCodesHelp + `
replay exits 0 when it ran, whether verdicts differ or not.`,
		Args: argsUsage(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runReplay(cmd.Context(), p, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&p.policy, "policy", "", "the policy to replay the log under (YAML or JSON)")
	cmd.Flags().BoolVar(&p.all, "all", false, "list every act, not only those that differ")
	addFormatFlag(cmd, &p.format, formatTable, formatJSON)
	return cmd
}

func runReplay(ctx context.Context, p replayParams, args []string, stdout, stderr io.Writer) error {
	if err := checkFormat(p.format, formatTable, formatJSON); err != nil {
		return err
	}
	if p.policy == "" {
		return fmt.Errorf("--policy is required")
	}
	c, err := compiler.CompileFile(p.policy)
	if err != nil {
		return err
	}
	logs := make([][]lineage.Record, len(args))
	for i, target := range args {
		if logs[i], err = loadLog(p.globalParams, target, stderr); err != nil {
			return err
		}
	}
	reps, err := replay.New(c).RunAll(ctx, logs, replay.Options{All: p.all, Head: true})
	if le := (*replay.LogError)(nil); errors.As(err, &le) {
		return fmt.Errorf("%s: %w", args[le.Index], le.Err)
	}
	if err != nil {
		return err
	}
	if len(reps) == 1 {
		if p.format == formatJSON {
			return writeJSONIndent(stdout, reps[0])
		}
		return writeReplayTable(stdout, reps[0])
	}
	if p.format == formatJSON {
		return writeJSONIndent(stdout, reps)
	}
	var total replay.Summary
	for i, rep := range reps {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		if err := writeReplayTable(stdout, rep); err != nil {
			return err
		}
		total.Requests += rep.Summary.Requests
		total.Differ += rep.Summary.Differ
		total.DifferentActs += rep.Summary.DifferentActs
		total.AllowedToDenied += rep.Summary.AllowedToDenied
		total.DeniedToAllowed += rep.Summary.DeniedToAllowed
	}
	_, err = fmt.Fprintf(stdout, "\n%d logs: %d requests replayed; outcomes that differ: %d (acts: %d); allowed would be denied: %d; denied would be allowed: %d\n",
		len(reps), total.Requests, total.Differ, total.DifferentActs, total.AllowedToDenied, total.DeniedToAllowed)
	return err
}

func writeReplayTable(w io.Writer, rep *replay.Report) error {
	s := rep.Summary
	fmt.Fprintf(w, "agent %s: recorded policy %s, replayed under %s\n", rep.Agent, shortDigest(rep.RecordedPolicy), shortDigest(rep.Policy))
	if len(rep.Events) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, " \tSEQ\tTIME\tKIND\tREQUEST\tTOOL\tRECORDED\tREPLAYED")
		for _, ev := range rep.Events {
			replayed := verdictText(ev.Replayed)
			if ev.Note != "" {
				replayed = "- (" + ev.Note + ")"
			}
			mark := " "
			if ev.Differ {
				mark = "*"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", mark, ev.Seq, ev.At.UTC().Format("2006-01-02T15:04:05.000Z"),
				ev.Kind, dash(ev.RequestID), dash(ev.Tool), verdictText(ev.Recorded), replayed)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "%d requests replayed; outcomes that differ: %d (acts: %d); allowed would be denied: %d; denied would be allowed: %d\n",
		s.Requests, s.Differ, s.DifferentActs, s.AllowedToDenied, s.DeniedToAllowed)
	changes := make([]string, 0, len(s.Changes))
	for k := range s.Changes {
		changes = append(changes, k)
	}
	sort.Strings(changes)
	for _, k := range changes {
		fmt.Fprintf(w, "  %s: %d\n", k, s.Changes[k])
	}
	if s.Differ == 0 && s.DifferentActs == 0 {
		fmt.Fprintln(w, "every verdict is the same")
	}
	return nil
}

// verdictText is a verdict in a table cell: "deny unlisted_tool (moderate 3)".
func verdictText(v *lineage.Verdict) string {
	if v == nil {
		return "-"
	}
	d, reason, scar := verdictColumns(*v)
	out := d + " " + reason
	if scar != "-" {
		out += " " + scar
	}
	if v.Terminated != "" {
		out += ", terminated " + string(v.Terminated)
	}
	return out
}
