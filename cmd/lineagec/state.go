package main

import (
	"context"
	"io"

	"github.com/spf13/cobra"
)

type stateParams struct {
	*globalParams
}

func newStateCmd(g *globalParams) *cobra.Command {
	p := stateParams{globalParams: g}
	return &cobra.Command{
		Use:   "state AGENT",
		Short: "Print an agent's folded state",
		Long: `State replays the agent's log (verifying it) and prints the folded state as
indented JSON: status, termination, budget, spent, remaining, scar_score,
scars, calls per tool, the rate-limit window and the pending requests.
` + exitCodesHelp + `
state exits 0, or 1 on errors (unknown agent, damaged log, …).`,
		Args: argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runState(cmd.Context(), p, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
}

func runState(ctx context.Context, p stateParams, args []string, stdout, stderr io.Writer) error {
	agent := args[0]
	g, done, err := p.openGuard(readData, "", stderr)
	if err != nil {
		return err
	}
	defer done()
	st, err := g.State(ctx, agent)
	if err != nil {
		return readable(err)
	}
	return writeJSONIndent(stdout, st)
}
