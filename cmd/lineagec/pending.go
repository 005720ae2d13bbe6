package main

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage"
)

type pendingParams struct {
	*globalParams
	format string
}

func newPendingCmd(g *globalParams) *cobra.Command {
	p := pendingParams{globalParams: g}
	cmd := &cobra.Command{
		Use:   "pending",
		Short: "List the requests that await approval",
		Long: `Pending lists every pending request of every agent, oldest first per agent:
agent, name, request id, tool, the cost it would charge, when it was made, and
its args. --format json prints {"pending": [{agent, name, request_id, tool, args,
at, cost}]}, as GET /v1/pending answers. Approve or reject one with
` + "`lineagec approve|reject AGENT REQUEST_ID`" + `.
` + exitCodesHelp + `
pending exits 0, or 1 on errors.`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPending(cmd.Context(), p, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	addFormatFlag(cmd, &p.format, formatTable, formatJSON)
	return cmd
}

func runPending(ctx context.Context, p pendingParams, stdout, stderr io.Writer) error {
	if err := checkFormat(p.format, formatTable, formatJSON); err != nil {
		return err
	}
	if c, err := p.remote(); c != nil || err != nil {
		if err != nil {
			return err
		}
		return remotePending(ctx, c, p.format, stdout)
	}
	s, err := openSession(p.globalParams, readData)
	if err != nil {
		return err
	}
	defer s.close(stderr)
	ids, err := s.rt.Agents()
	if err != nil {
		return err
	}
	rows := []pendingLine{}
	for _, id := range ids {
		list, err := s.rt.Pending(ctx, id)
		if err != nil {
			return s.agentError(id, err)
		}
		if len(list) == 0 {
			continue
		}
		info, err := s.rt.Info(ctx, id)
		if err != nil {
			return s.agentError(id, err)
		}
		for _, r := range list {
			args := r.Args
			if args == nil {
				args = map[string]any{}
			}
			rows = append(rows, pendingLine{Agent: id, Name: info.Name, RequestID: r.RequestID, Tool: r.Tool,
				Args: args, At: lineage.Time{Time: r.At}, Cost: r.Cost})
		}
	}
	return writePending(stdout, p.format, rows)
}
