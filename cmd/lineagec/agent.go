package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/api"
	"github.com/lineage-guard/lineage/runtime/store"
)

func newAgentCmd(g *globalParams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Create and list agents",
		Long: `Agent creates agents and lists those in the store (--data DIR, or --store URL).
` + exitCodesHelp,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown command %q for %q\nusage: %s", args[0], cmd.CommandPath(), cmd.UseLine()+" create|list")
			}
			return cmd.Help()
		},
	}
	cmd.AddCommand(newAgentCreateCmd(g), newAgentListCmd(g))
	return cmd
}

type agentCreateParams struct {
	*globalParams
	policy string
	name   string
	parent string
	format string
}

func newAgentCreateCmd(g *globalParams) *cobra.Command {
	p := agentCreateParams{globalParams: g}
	cmd := &cobra.Command{
		Use:   "create --policy FILE [--name N] [--parent ID]",
		Short: "Create an agent under a policy",
		Long: `Create compiles the policy and starts a new agent: its log gets the genesis
record and the policy record, and can never take another policy. To change a
policy, create a new agent with --parent naming the one it replaces; its
genesis records the parent's id and current head.

It prints the new agent id (agt_…) alone on stdout; --format json prints
{agent, digest}. The data directory (--data) is created if it does not exist.
Through a server (--server), the agent also gets its token (lga_…), which the
server returns only this once: text prints the id on stdout and the token on
stderr; --format json prints {agent, token, digest}.
` + exitCodesHelp + `
create exits 0 when the agent was created, 1 otherwise (invalid policy, unknown
parent, I/O).`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runAgentCreate(cmd.Context(), p, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&p.policy, "policy", "", "policy file, JSON or YAML (required)")
	cmd.Flags().StringVar(&p.name, "name", "", "a name for people, kept in genesis")
	cmd.Flags().StringVar(&p.parent, "parent", "", "id of the agent this one replaces")
	_ = cmd.MarkFlagRequired("policy")
	addFormatFlag(cmd, &p.format, formatText, formatJSON)
	return cmd
}

func runAgentCreate(ctx context.Context, p agentCreateParams, _ []string, stdout, stderr io.Writer) error {
	if err := checkFormat(p.format, formatText, formatJSON); err != nil {
		return err
	}
	if p.policy == "" {
		return fmt.Errorf("agent create needs a policy: --policy FILE")
	}
	// Compiled here first: an invalid policy creates nothing, not even the
	// data directory; the problems name file:line:col; and the guard gets
	// the normalized document, extensions inlined (D74: policies over the network inline their Rego).
	r := compileFile(p.policy)
	if !r.Valid {
		return invalidPolicy(r, stderr)
	}
	g, done, err := p.openGuard(createData, "", stderr)
	if err != nil {
		return err
	}
	defer done()
	created, err := g.CreateAgent(ctx, r.compiled.Document, p.name, p.parent)
	if err != nil {
		return fmt.Errorf("creating the agent: %w", readable(err))
	}
	if created.Token == "" { // a local agent: no token
		if p.format == formatJSON {
			return writeJSONLine(stdout, struct {
				Agent  string `json:"agent"`
				Digest string `json:"digest"`
			}{created.Agent, created.Digest})
		}
	} else {
		if p.format == formatJSON {
			return writeJSONLine(stdout, created)
		}
		fmt.Fprintf(stderr, "lineagec: the agent's token, shown this once: %s\n", created.Token)
	}
	_, err = fmt.Fprintln(stdout, created.Agent)
	return err
}

type agentListParams struct {
	*globalParams
	format string
	limit  int
}

func newAgentListCmd(g *globalParams) *cobra.Command {
	p := agentListParams{globalParams: g}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the agents in the store (--data or --store)",
		Long: `List prints the id of every agent in the store (--data or --store), one per line.
--format table adds name, status, remaining budget, scar score and the number of
records; --format json prints the same as a JSON array. The table and JSON
formats verify each log; a damaged one is listed with status "damaged".
--limit N lists the first N agents only (by id); without it every agent is
listed, read from the store's index a page at a time.
` + exitCodesHelp + `
list exits 0, or 1 if a log is damaged (table and json) or on errors.`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runAgentList(cmd.Context(), p, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	addFormatFlag(cmd, &p.format, formatText, formatTable, formatJSON)
	cmd.Flags().IntVar(&p.limit, "limit", 0, "list at most this many agents (0: all)")
	return cmd
}

// agentSummary is one row of agent list --format table|json.
type agentSummary struct {
	Agent     string `json:"agent"`
	Name      string `json:"name"`
	Status    string `json:"status"`
	Remaining *int64 `json:"remaining"`
	ScarScore *int64 `json:"scar_score"`
	Records   int    `json:"records"`
	Error     string `json:"error,omitempty"`
}

func runAgentList(ctx context.Context, p agentListParams, _ []string, stdout, stderr io.Writer) error {
	if err := checkFormat(p.format, formatText, formatTable, formatJSON); err != nil {
		return err
	}
	g, done, err := p.openGuard(readData, "", stderr)
	if err != nil {
		return err
	}
	defer done()
	agents, err := firstRows(ctx, g.AgentsPage, p.limit)
	if err != nil {
		return readable(err)
	}
	if p.format == formatText {
		for _, a := range agents {
			fmt.Fprintln(stdout, a.Agent)
		}
		return nil
	}
	rows := make([]agentSummary, 0, len(agents))
	damaged := 0
	for _, a := range agents {
		row, err := summarize(ctx, g, a)
		if err != nil {
			return readable(err)
		}
		if row.Error != "" {
			damaged++
			fmt.Fprintf(stderr, "lineagec: agent %s: %s\n", a.Agent, row.Error)
		}
		rows = append(rows, row)
	}
	if err := writeAgentRows(stdout, p.format, rows); err != nil {
		return err
	}
	if damaged > 0 {
		return &exitError{code: exitFailure, err: fmt.Errorf("%d of %d logs are damaged", damaged, len(agents))}
	}
	return nil
}

// summarize is an agent's row of the table: the index row (name, status,
// damage) and, for the remaining budget and the scar score, which the index
// does not keep, the agent's state (its log replayed and verified; the
// records counted to its last seq). A log that does not replay is listed
// damaged.
func summarize(ctx context.Context, g guard, a api.Agent) (agentSummary, error) {
	row := agentSummary{Agent: a.Agent, Name: a.Name, Status: a.Status, Error: a.Error}
	if a.Error == "" {
		st, err := g.State(ctx, a.Agent)
		if err != nil && !listedDamaged(err) {
			return row, err
		}
		if err == nil {
			row.Status, row.Records = string(st.Status), int(st.Seq)+1
			row.Remaining, row.ScarScore = &st.Remaining, &st.ScarScore
			return row, nil
		}
		row.Error = strings.TrimPrefix(err.Error(), "agent "+a.Agent+": ")
	}
	// The name of a log that does not verify is not to be trusted.
	row.Name, row.Status = "", store.StatusDamaged
	return row, nil
}

// listedDamaged tells an agent whose log does not replay (damaged, locally
// or on a server: corrupt_log) from a failure of the list itself.
func listedDamaged(err error) bool {
	return isDamage(err) || errors.Is(err, lineage.ErrCorrupt) || errors.Is(err, store.ErrDamaged)
}

// writeAgentRows prints agent list --format table|json.
func writeAgentRows(w io.Writer, format string, rows []agentSummary) error {
	if format == formatJSON {
		return writeJSONIndent(w, rows)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSTATUS\tREMAINING\tSCAR_SCORE\tRECORDS")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", r.Agent, dash(r.Name), r.Status,
			intOrDash(r.Remaining), intOrDash(r.ScarScore), r.Records)
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func intOrDash(n *int64) string {
	if n == nil {
		return "-"
	}
	return strconv.FormatInt(*n, 10)
}
