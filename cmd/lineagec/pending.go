package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/lineage-guard/lineage/api"
	"github.com/spf13/cobra"
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
	g, done, err := p.openGuard(readData, "", stderr)
	if err != nil {
		return err
	}
	defer done()
	rows, err := firstRows(ctx, g.PendingPage, p.limit)
	if err != nil {
		return readable(err)
	}
	return writePending(stdout, p.format, rows)
}

// writePending prints pending requests: a table, or {"pending": […]} as the API answers.
func writePending(w io.Writer, format string, rows []api.Pending) error {
	if format == formatJSON {
		return writeJSONIndent(w, map[string]any{"pending": rows})
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tNAME\tREQUEST_ID\tTOOL\tCOST\tAT\tARGS")
	for _, r := range rows {
		args, _ := json.Marshal(r.Args)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.Agent, dash(r.Name), r.RequestID, r.Tool, r.Cost,
			r.At.UTC().Format(time.RFC3339), args)
	}
	return tw.Flush()
}
