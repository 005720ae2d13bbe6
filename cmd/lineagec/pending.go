package main

import (
	"context"
	"errors"
	"io"

	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/runtime"
)

type pendingParams struct {
	*globalParams
	format string
	limit  int
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
` + "`lineagec approve|reject AGENT REQUEST_ID`" + `. --limit N lists the first N
only; without it every pending request is listed, read a page at a time.
` + exitCodesHelp + `
pending exits 0, or 1 on errors.`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPending(cmd.Context(), p, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	addFormatFlag(cmd, &p.format, formatTable, formatJSON)
	cmd.Flags().IntVar(&p.limit, "limit", 0, "list at most this many requests (0: all)")
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
		return remotePending(ctx, c, p.format, p.limit, stdout)
	}
	s, err := openSession(p.globalParams, readData)
	if err != nil {
		return err
	}
	defer s.close(stderr)
	rows := []pendingLine{}
	err = s.rt.AllPending(ctx, func(r runtime.PendingRow) error {
		if p.limit > 0 && len(rows) == p.limit {
			return errEnough
		}
		rows = append(rows, pendingLine{Agent: r.Agent, Name: r.Name, RequestID: r.RequestID, Tool: r.Tool,
			Args: r.Args, At: lineage.Time{Time: r.At}, Cost: r.Cost})
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return err
	}
	return writePending(stdout, p.format, rows)
}

// errEnough stops a walk over a list's pages once --limit rows are in.
var errEnough = errors.New("enough rows")

// firstRows reads a remote list's pages until limit rows (0: all).
func firstRows[T any](ctx context.Context, page func(context.Context, client.Page) ([]T, string, error), limit int) ([]T, error) {
	out := []T{}
	p := client.Page{Limit: 1000}
	for {
		if limit > 0 {
			p.Limit = min(1000, limit-len(out))
		}
		rows, next, err := page(ctx, p)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
		if next == "" || limit > 0 && len(out) >= limit {
			return out, nil
		}
		p.Cursor = next
	}
}
