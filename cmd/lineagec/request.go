package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/policy"
	"github.com/lineage-guard/lineage/runtime"
)

type requestParams struct {
	*globalParams
	args    string
	argsSet bool // --args was given (even as "")
	id      string
	explain bool   // --explain
	policy  string // --policy: the source of the agent's policy, for positions
}

func newRequestCmd(g *globalParams) *cobra.Command {
	p := requestParams{globalParams: g}
	cmd := &cobra.Command{
		Use:   "request AGENT TOOL [--args JSON] [--id ID]",
		Short: "Ask the guard whether an agent may call a tool",
		Long: `Request decides one tool call of an agent and records it in the agent's log.
--args is the call's arguments as one JSON object; --id is the caller's
idempotency key: a retry with the same id, tool and args returns the recorded
verdict again and records nothing (the same id with another tool or other args
is an error). Without --id the guard assigns req_<seq>.

It prints the verdict as one line of JSON:
  {"decision","reason","cost","scar","terminated","request_id","seq"}
A malformed request (bad tool name, args not a JSON object, …), an unknown agent
or an id conflict is an error, and nothing is recorded. --explain then prints the steps of the
decision order up to the deciding one and where the policy says it, as
"lineagec explain" does (positions in --policy FILE when given and the
agent's policy, else in the normalized policy of its log).
` + exitCodesHelp + `
request exits 0 allow, 2 deny, 3 pending (approve or reject it with its
request_id), 1 error.`,
		Args: argsUsage(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			p.argsSet = cmd.Flags().Changed("args")
			return runRequest(cmd.Context(), p, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&p.args, "args", "", `the tool call's arguments, one JSON object (e.g. '{"amount": 120}')`)
	cmd.Flags().StringVar(&p.id, "id", "", "idempotency key of the request (unique per agent)")
	cmd.Flags().BoolVar(&p.explain, "explain", false, "after the verdict, print the steps of the decision order that decided it (explain.go)")
	cmd.Flags().StringVar(&p.policy, "policy", "", "with --explain: the agent's policy file, for file:line:col positions")
	return cmd
}

func runRequest(ctx context.Context, p requestParams, args []string, stdout, stderr io.Writer) error {
	agent, tool := args[0], args[1]
	req := lineage.Request{ID: p.id, Tool: tool}
	if p.argsSet || p.args != "" {
		a, err := runtime.ParseArgs(p.args)
		if err != nil {
			return fmt.Errorf("--args: %w", err)
		}
		req.Args = a
	}
	g, done, err := p.openGuard(writeData, "", stderr)
	if err != nil {
		return err
	}
	defer done()
	var why *explainer
	if p.explain {
		lg, ok := g.(*localGuard)
		if !ok {
			return fmt.Errorf("--explain works on a local store only")
		}
		if why, err = newExplainer(ctx, lg.s.rt, agent, p.policy); err != nil {
			return lg.s.agentError(agent, err)
		}
	}
	v, err := g.Request(ctx, agent, req)
	if err != nil {
		return readable(err)
	}
	if err := writeJSONLine(stdout, v); err != nil {
		return err
	}
	if v.Reason == "unlisted_tool" {
		if _, doc, err := g.Policy(ctx, agent); err == nil {
			unlistedHint(stderr, tool, doc)
		}
	}
	if why != nil {
		if req.At.IsZero() {
			req.At = time.Now().UTC()
		}
		writeExplanation(stdout, req, describe(why.policy, why.doc, req.Tool, v, &why.state, v.Seq <= why.state.Seq))
	}
	return verdictExit(v)
}

// unlistedHint prints, for an unlisted_tool denial, the listed tool the
// name is a typo of, if there is one (the verdict stays as it is). D304 (did
// you mean, for tools).
func unlistedHint(stderr io.Writer, tool string, doc []byte) {
	if h := policy.DidYouMean(tool, policy.ListedTools(doc)); h != "" {
		fmt.Fprintf(stderr, "lineagec: %q is not a tool of the agent's policy; %s\n", tool, h)
	}
}
