package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/internal/strictjson"
	"github.com/lineage-guard/lineage/policy"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store"
)

type logParams struct {
	*globalParams
	format string
}

func newLogCmd(g *globalParams) *cobra.Command {
	p := logParams{globalParams: g}
	cmd := &cobra.Command{
		Use:   "log AGENT",
		Short: "Print an agent's log",
		Long: `Log verifies the agent's hash chain and prints its records. The default
format prints them as JSON lines, byte for byte as stored (canonical JSON), so
the output is itself a log that "lineagec verify FILE" accepts.

--format table prints one row per record for people: seq, time, kind, tool,
decision, reason, scar and the budget remaining after the record.

If the log is damaged, the records before the damage are printed and the
command fails naming the first bad seq.

With --store postgres://… it reads the PostgreSQL store that serve nodes
share: "lineagec log --store URL AGENT > agent.jsonl" exports the log for an
audit, byte for byte the file store's file (docs/stores.md).
` + exitCodesHelp + `
log exits 0, or 1 on errors (unknown agent, damaged log, …).`,
		Args: argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runLog(p, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	addFormatFlag(cmd, &p.format, formatJSON, formatTable)
	return cmd
}

func runLog(p logParams, args []string, stdout, stderr io.Writer) error {
	if err := checkFormat(p.format, formatJSON, formatTable); err != nil {
		return err
	}
	agent := args[0]
	g, done, err := p.openGuard(readData, "", stderr)
	if err != nil {
		return err
	}
	defer done()
	b, err := g.Log(context.Background(), agent, 0)
	if err != nil && !isDamage(err) {
		return readable(err)
	}
	var lines [][]byte
	if len(b) > 0 {
		lines = bytes.Split(bytes.TrimSuffix(b, []byte{'\n'}), []byte{'\n'})
	}
	if p.format == formatTable {
		recs := make([]lineage.Record, 0, len(lines))
		for _, line := range lines {
			var rec lineage.Record
			if err := strictjson.Unmarshal(line, &rec, 0); err != nil {
				return fmt.Errorf("a line of the log is not a record: %w", err)
			}
			recs = append(recs, rec)
		}
		if werr := writeLogTable(stdout, recs); werr != nil {
			return werr
		}
	} else if _, werr := stdout.Write(b); werr != nil {
		return werr
	}
	if seq, reason, ok := damageOf(err); ok {
		// The same words whichever store the log is in, and what verify says.
		return fmt.Errorf("the log of %s is damaged at seq %d: %s (the %d records before it are printed)", agent, seq, reason, len(lines))
	}
	return nil
}

// damageOf tells the first bad seq of a damaged log and why: a broken chain
// (*runtime.ChainError) or a record the store cannot read (*store.DamageError).
func damageOf(err error) (seq uint64, reason string, ok bool) {
	var chain *runtime.ChainError
	var damage *store.DamageError
	switch {
	case errors.As(err, &chain):
		return chain.Seq, chain.Reason, true
	case errors.As(err, &damage):
		return damage.Seq, damage.Reason, true
	}
	return 0, "", false
}

// compileLogged compiles a log's policy record again, as opening the agent
// does, so that verify fails exactly when open does (docs/log.md).
func compileLogged(doc []byte) (*policy.Compiled, error) { return compiler.CompileRecorded(doc) }

// readLog reads an agent's log from the store and verifies it: the records
// and their stored lines up to the first bad one, and the error, if any (a
// *runtime.ChainError or a *store.DamageError for a damaged log).
func readLog(s *session, agent string) ([]lineage.Record, [][]byte, error) {
	var lines [][]byte
	recs, err := runtime.VerifyLog(func(fn func(uint64, []byte) error) error {
		return s.st.Scan(agent, func(seq uint64, line []byte) error {
			if err := fn(seq, line); err != nil {
				return err
			}
			lines = append(lines, bytes.Clone(line))
			return nil
		})
	}, compileLogged)
	return recs, lines, err
}

// writeLogTable prints records as an aligned table. The remaining column is
// folded here from the policy's budget and the verdicts' costs: it is for
// display only (lineagec state is the runtime's own fold).
func writeLogTable(w io.Writer, recs []lineage.Record) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tKIND\tTOOL\tDECISION\tREASON\tSCAR\tREMAINING")
	var (
		remaining int64
		budgeted  bool
		tools     = map[string]string{} // request id → tool
	)
	for _, rec := range recs {
		tool, decision, reason, scar := "-", "-", "-", "-"
		switch rec.Kind {
		case lineage.KindGenesis:
			var b lineage.GenesisBody
			if json.Unmarshal(rec.Body, &b) == nil {
				reason = b.Agent
				if b.Name != "" {
					reason += " (" + b.Name + ")"
				}
				if b.Parent != nil {
					reason += ", parent " + b.Parent.Agent
				}
			}
		case lineage.KindPolicy:
			var b lineage.PolicyBody
			var doc struct {
				Budget int64 `json:"budget"`
			}
			if json.Unmarshal(rec.Body, &b) == nil && json.Unmarshal(b.Policy, &doc) == nil {
				remaining, budgeted = doc.Budget, true
				reason = shortDigest(b.Digest)
			}
		case lineage.KindAction:
			var b lineage.ActionBody
			if json.Unmarshal(rec.Body, &b) == nil {
				tools[b.Request.ID] = b.Request.Tool
				tool = b.Request.Tool
				decision, reason, scar = verdictColumns(b.Verdict)
				remaining -= b.Verdict.Cost
			}
		case lineage.KindApproval:
			var b lineage.ApprovalBody
			if json.Unmarshal(rec.Body, &b) == nil {
				if t, ok := tools[b.RequestID]; ok {
					tool = t
				}
				decision, reason, scar = verdictColumns(b.Verdict)
				how := "rejected"
				if b.Approved {
					how = "approved"
				}
				reason = fmt.Sprintf("%s (%s %s by %s)", reason, b.RequestID, how, b.Approver)
				remaining -= b.Verdict.Cost
			}
		case lineage.KindTermination:
			var b lineage.TerminationBody
			if json.Unmarshal(rec.Body, &b) == nil {
				reason = string(b.Reason)
				if b.By != "" {
					reason += " by " + b.By
				}
				if b.Note != "" {
					reason += ": " + b.Note
				}
			}
		}
		rem := "-"
		if budgeted {
			rem = strconv.FormatInt(remaining, 10)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", rec.Seq,
			rec.At.UTC().Format("2006-01-02T15:04:05.000Z"), rec.Kind, tool, decision, reason, scar, rem)
	}
	return tw.Flush()
}

func verdictColumns(v lineage.Verdict) (decision, reason, scar string) {
	decision, reason, scar = string(v.Decision), v.Reason, "-"
	if v.Scar != nil {
		scar = fmt.Sprintf("%s (%d)", v.Scar.Severity, v.Scar.Weight)
	}
	if reason == "" {
		reason = "-"
	}
	return decision, reason, scar
}

// shortDigest abbreviates "sha256:<64 hex>" to its first 12 hex digits.
func shortDigest(d string) string {
	const keep = len("sha256:") + 12
	if len(d) > keep {
		return d[:keep] + "…"
	}
	return d
}
