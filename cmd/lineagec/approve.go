package main

import (
	"context"
	"io"

	"github.com/spf13/cobra"
)

type approveParams struct {
	*globalParams
	by   string
	note string
}

func newApproveCmd(g *globalParams) *cobra.Command {
	p := approveParams{globalParams: g}
	cmd := &cobra.Command{
		Use:   "approve AGENT REQUEST_ID --by NAME",
		Short: "Approve a pending request",
		Long: `Approve decides a pending request (one whose verdict was "pending"). The
guard checks the policy again now (tool rule, rate limit, max_calls,
constraints, budget): if everything still holds, the call is allowed, charged
and counted; if not, it is denied with that check's reason and no scar.
--by names the person or service approving; it cannot be the agent.
--note (at most 256 characters) is kept in the approval record and shown to
the agent with the verdict.

It prints the verdict as one line of JSON.
` + exitCodesHelp + `
approve exits 0 when the call is allowed, 2 when the re-check denies it, 1 on
errors (not pending, already decided, terminated agent, …).`,
		Args: argsUsage(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runApprove(cmd.Context(), p, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&p.by, "by", "", "who approves (required)")
	cmd.Flags().StringVar(&p.note, "note", "", "a note for the record and the agent (at most 256 characters)")
	_ = cmd.MarkFlagRequired("by")
	return cmd
}

func newRejectCmd(g *globalParams) *cobra.Command {
	p := approveParams{globalParams: g}
	cmd := &cobra.Command{
		Use:   "reject AGENT REQUEST_ID --by NAME",
		Short: "Reject a pending request",
		Long: `Reject denies a pending request with the reason approval_rejected and no
scar. --by names the person or service rejecting; it cannot be the agent.
--note (at most 256 characters) is kept in the approval record and shown to
the agent with the verdict: say why, so that it can do better.

It prints the verdict as one line of JSON.
` + exitCodesHelp + `
reject exits 2 (the request is denied), or 1 on errors (not pending, already
decided, terminated agent, …).`,
		Args: argsUsage(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runReject(cmd.Context(), p, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&p.by, "by", "", "who rejects (required)")
	cmd.Flags().StringVar(&p.note, "note", "", "why, for the record and the agent (at most 256 characters)")
	_ = cmd.MarkFlagRequired("by")
	return cmd
}

func runApprove(ctx context.Context, p approveParams, args []string, stdout, stderr io.Writer) error {
	return decidePending(ctx, p, args, true, stdout, stderr)
}

func runReject(ctx context.Context, p approveParams, args []string, stdout, stderr io.Writer) error {
	return decidePending(ctx, p, args, false, stdout, stderr)
}

func decidePending(ctx context.Context, p approveParams, args []string, approve bool, stdout, stderr io.Writer) error {
	agent, id := args[0], args[1]
	g, done, err := p.openGuard(writeData, p.by, stderr)
	if err != nil {
		return err
	}
	defer done()
	decide := g.RejectWithNote
	if approve {
		decide = g.ApproveWithNote
	}
	v, err := decide(ctx, agent, id, p.note)
	if err != nil {
		return readable(err)
	}
	if err := writeJSONLine(stdout, v); err != nil {
		return err
	}
	return verdictExit(v)
}
