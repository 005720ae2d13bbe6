package main

import (
	"context"
	"io"

	"github.com/spf13/cobra"
)

type terminateParams struct {
	*globalParams
	by     string
	reason string
}

func newTerminateCmd(g *globalParams) *cobra.Command {
	p := terminateParams{globalParams: g}
	cmd := &cobra.Command{
		Use:   "terminate AGENT --by NAME [--reason TEXT]",
		Short: "Kill an agent (the kill switch)",
		Long: `Terminate appends a termination record "killed" to the agent's log and seals
it: every later request is denied with the reason "terminated", and its pending
requests are void. --by names who pulled the switch; --reason is free text kept
in the record (as "note").

It prints the agent's state as JSON.
` + exitCodesHelp + `
terminate exits 0, or 1 on errors (unknown agent, already terminated, …).`,
		Args: argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTerminate(cmd.Context(), p, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&p.by, "by", "", "who terminates the agent (required)")
	cmd.Flags().StringVar(&p.reason, "reason", "", "why, in words (kept in the log)")
	_ = cmd.MarkFlagRequired("by")
	return cmd
}

func runTerminate(ctx context.Context, p terminateParams, args []string, stdout, stderr io.Writer) error {
	agent := args[0]
	g, done, err := p.openGuard(writeData, p.by, stderr)
	if err != nil {
		return err
	}
	defer done()
	st, err := g.Terminate(ctx, agent, p.reason)
	if err != nil {
		return readable(err)
	}
	return writeJSONIndent(stdout, st)
}
