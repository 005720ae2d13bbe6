package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/runtime"
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
	if c, err := p.remote(); c != nil || err != nil {
		if err != nil {
			return err
		}
		return remoteAgentCreate(ctx, c, p, stdout, stderr)
	}
	// Compile first: an invalid policy creates nothing, not even the directory.
	r := compileFile(p.policy)
	if !r.Valid {
		return invalidPolicy(r, stderr)
	}
	s, err := openSession(p.globalParams, createData)
	if err != nil {
		return err
	}
	defer s.close(stderr)
	opts := runtime.CreateOptions{Name: p.name}
	if p.parent != "" {
		opts.Parent = &lineage.Parent{Agent: p.parent}
	}
	id, err := s.rt.CreateAgent(ctx, r.compiled, opts)
	if err != nil {
		if p.parent != "" {
			return fmt.Errorf("creating the agent: %w", s.agentError(p.parent, err))
		}
		return fmt.Errorf("creating the agent: %w", err)
	}
	if p.format == formatJSON {
		return writeJSONLine(stdout, struct {
			Agent  string `json:"agent"`
			Digest string `json:"digest"`
		}{id, r.Digest})
	}
	_, err = fmt.Fprintln(stdout, id)
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
	if c, err := p.remote(); c != nil || err != nil {
		if err != nil {
			return err
		}
		return remoteAgentList(ctx, c, p, stdout, stderr)
	}
	s, err := openSession(p.globalParams, readData)
	if err != nil {
		return err
	}
	defer s.close(stderr)
	var ids []string
	err = s.rt.AllAgents(ctx, "", func(a runtime.AgentRow) error {
		if p.limit > 0 && len(ids) == p.limit {
			return errEnough
		}
		ids = append(ids, a.Agent)
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return err
	}
	if p.format == formatText {
		for _, id := range ids {
			fmt.Fprintln(stdout, id)
		}
		return nil
	}
	rows := make([]agentSummary, 0, len(ids))
	damaged := 0
	for _, id := range ids {
		row := summarize(ctx, s, id)
		if row.Error != "" {
			damaged++
			fmt.Fprintf(stderr, "lineagec: agent %s: %s\n", id, row.Error)
		}
		rows = append(rows, row)
	}
	if err := writeAgentRows(stdout, p.format, rows); err != nil {
		return err
	}
	if damaged > 0 {
		return &exitError{code: exitFailure, err: fmt.Errorf("%d of %d logs are damaged", damaged, len(ids))}
	}
	return nil
}

// summarize reads one agent's log (verifying it) and its folded state.
func summarize(ctx context.Context, s *session, id string) agentSummary {
	row := agentSummary{Agent: id}
	recs, err := s.rt.Records(id)
	row.Records = len(recs)
	if len(recs) > 0 {
		var g lineage.GenesisBody
		if json.Unmarshal(recs[0].Body, &g) == nil {
			row.Name = g.Name
		}
	}
	if err == nil {
		var st lineage.State
		if st, err = s.rt.State(ctx, id); err == nil {
			row.Status = string(st.Status)
			row.Remaining, row.ScarScore = &st.Remaining, &st.ScarScore
			return row
		}
	}
	row.Status, row.Error = "damaged", strings.TrimPrefix(err.Error(), "agent "+id+": ")
	return row
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
