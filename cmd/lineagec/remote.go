package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/lineage-guard/lineage/api"

	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/internal/jsontext"
)

// The CLI as a client of `lineagec serve` (docs/service.md): with --server URL (or
// $LINEAGE_SERVER) and $LINEAGE_TOKEN, the agent commands talk to a server
// instead of opening the data directory, with the same output and exit status.

// remoteParams are the global flags of the client mode.
type remoteParams struct {
	server string // --server; "" means $LINEAGE_SERVER, else the local store
}

// remoteCommands are the commands that work against a server.
var remoteCommands = map[string]bool{
	"lineagec agent create": true, "lineagec agent list": true, "lineagec request": true,
	"lineagec pending": true, "lineagec approve": true, "lineagec reject": true,
	"lineagec terminate": true, "lineagec state": true, "lineagec log": true, "lineagec verify": true,
	"lineagec checkpoint": true, "lineagec backup": true,
}

// addRemoteFlags adds --server, and lets approve, reject and terminate run
// without --by against a server (where --by is refused: the token names the approver).
func addRemoteFlags(root *cobra.Command, g *globalParams) {
	root.PersistentFlags().StringVar(&g.srv.server, "server", "",
		"URL of a lineagec serve to talk to instead of the data directory (default $LINEAGE_SERVER); the token is $LINEAGE_TOKEN")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if g.serverURL() == "" {
			return nil
		}
		if !remoteCommands[cmd.CommandPath()] {
			if cmd.Flags().Changed("server") {
				return fmt.Errorf("%s does not talk to a server (--server)", cmd.CommandPath())
			}
			return nil
		}
		if by := cmd.Flags().Lookup("by"); by != nil {
			if by.Changed {
				return errors.New("--by is refused with a server: the approver is the principal of $LINEAGE_TOKEN")
			}
			delete(by.Annotations, cobra.BashCompOneRequiredFlag)
		}
		if cmd.Flags().Changed("data") {
			return errors.New("--data and --server exclude each other")
		}
		return nil
	}
}

// serverURL is the server the commands talk to, or "" for the local store.
func (g *globalParams) serverURL() string {
	if g.srv.server != "" {
		return g.srv.server
	}
	return os.Getenv("LINEAGE_SERVER")
}

// remote returns the client of the server, or nil for the local store.
func (g *globalParams) remote() (*client.Client, error) {
	u := g.serverURL()
	if u == "" {
		return nil, nil
	}
	tok := os.Getenv("LINEAGE_TOKEN")
	if tok == "" {
		return nil, errors.New("talking to a server needs its token in $LINEAGE_TOKEN")
	}
	return client.New(u, tok, nil)
}

// remoteError makes a server's error read like the local one.
func remoteError(err error) error {
	var ce *api.Error
	if errors.As(err, &ce) {
		for _, d := range ce.Errors {
			err = fmt.Errorf("%w\n%s: %s (%s)", err, orSlash(d.Pointer), d.Message, d.Code)
		}
	}
	return err
}

func orSlash(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

func remoteAgentCreate(ctx context.Context, c *client.Client, p agentCreateParams, stdout, stderr io.Writer) error {
	// Compiled here first: the problems name file:line:col, and the server
	// gets the normalized document, extensions inlined (D74).
	r := compileFile(p.policy)
	if !r.Valid {
		return invalidPolicy(r, stderr)
	}
	created, err := c.CreateAgent(ctx, r.compiled.Document, p.name, p.parent)
	if err != nil {
		return fmt.Errorf("creating the agent: %w", remoteError(err))
	}
	if p.format == formatJSON {
		return writeJSONLine(stdout, created)
	}
	fmt.Fprintf(stderr, "lineagec: the agent's token, shown this once: %s\n", created.Token)
	_, err = fmt.Fprintln(stdout, created.Agent)
	return err
}

func remoteAgentList(ctx context.Context, c *client.Client, p agentListParams, stdout, stderr io.Writer) error {
	agents, err := firstRows(ctx, c.AgentsPage, p.limit)
	if err != nil {
		return remoteError(err)
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
		row := agentSummary{Agent: a.Agent, Name: a.Name, Status: a.Status, Records: int(a.Seq) + 1, Error: a.Error}
		if a.Error == "" {
			st, err := c.State(ctx, a.Agent)
			if err != nil {
				return remoteError(err)
			}
			row.Remaining, row.ScarScore = &st.Remaining, &st.ScarScore
		} else {
			damaged++
			row.Records = 0
			fmt.Fprintf(stderr, "lineagec: agent %s: %s\n", a.Agent, a.Error)
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

func remoteRequest(ctx context.Context, c *client.Client, agent string, req lineage.Request, stdout, stderr io.Writer) error {
	v, err := c.Request(ctx, agent, req)
	if err != nil {
		return remoteError(err)
	}
	if err := writeJSONLine(stdout, v); err != nil {
		return err
	}
	if v.Reason == "unlisted_tool" {
		if _, doc, err := c.Policy(ctx, agent); err == nil {
			unlistedHint(stderr, req.Tool, doc)
		}
	}
	return verdictExit(v)
}

func remoteDecide(ctx context.Context, c *client.Client, agent, id, note string, approve bool, stdout io.Writer) error {
	decide := c.RejectWithNote
	if approve {
		decide = c.ApproveWithNote
	}
	v, err := decide(ctx, agent, id, note)
	if err != nil {
		return remoteError(err)
	}
	if err := writeJSONLine(stdout, v); err != nil {
		return err
	}
	return verdictExit(v)
}

func remoteTerminate(ctx context.Context, c *client.Client, agent, reason string, stdout io.Writer) error {
	st, err := c.Terminate(ctx, agent, reason)
	if err != nil {
		return remoteError(err)
	}
	return writeJSONIndent(stdout, st)
}

func remoteState(ctx context.Context, c *client.Client, agent string, stdout io.Writer) error {
	st, err := c.State(ctx, agent)
	if err != nil {
		return remoteError(err)
	}
	return writeJSONIndent(stdout, st)
}

func remoteLog(ctx context.Context, c *client.Client, agent, format string, stdout io.Writer) error {
	b, err := c.Log(ctx, agent, 0)
	if err != nil {
		return remoteError(err)
	}
	if format != formatTable {
		_, err := stdout.Write(b)
		return err
	}
	var recs []lineage.Record
	for _, line := range bytes.Split(bytes.TrimSuffix(b, []byte{'\n'}), []byte{'\n'}) {
		var rec lineage.Record
		if err := jsontext.Unmarshal(line, &rec, 0); err != nil {
			return fmt.Errorf("the server sent a line that is not a record: %w", err)
		}
		recs = append(recs, rec)
	}
	return writeLogTable(stdout, recs)
}

func remoteVerify(ctx context.Context, c *client.Client, agent, format string, stdout io.Writer) error {
	r, err := c.Verify(ctx, agent)
	if err != nil {
		return remoteError(err)
	}
	res := verifyResult{OK: r.OK, Records: r.Records, Head: r.Head, BadSeq: r.Seq, Reason: r.Message}
	return writeVerifyResult(stdout, format, res)
}

// writeVerifyResult prints a verify result and picks the exit status.
func writeVerifyResult(stdout io.Writer, format string, res verifyResult) error {
	if format == formatJSON {
		if err := writeJSONIndent(stdout, res); err != nil {
			return err
		}
	} else if res.OK {
		fmt.Fprintf(stdout, "ok: %d records, head %s\n", res.Records, res.Head)
	} else {
		fmt.Fprintf(stdout, "damaged at seq %d: %s\n", *res.BadSeq, res.Reason)
	}
	if !res.OK {
		return &exitError{code: exitFailure}
	}
	return nil
}

// pendingLine is one pending request as lineagec pending prints it.
type pendingLine struct {
	Agent     string         `json:"agent"`
	Name      string         `json:"name"`
	RequestID string         `json:"request_id"`
	Tool      string         `json:"tool"`
	Args      map[string]any `json:"args"`
	At        lineage.Time   `json:"at"`
	Cost      int64          `json:"cost"`
}

// writePending prints pending requests: a table, or {"pending": […]} as the API answers.
func writePending(w io.Writer, format string, rows []pendingLine) error {
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

func remotePending(ctx context.Context, c *client.Client, format string, limit int, stdout io.Writer) error {
	list, err := firstRows(ctx, c.PendingPage, limit)
	if err != nil {
		return remoteError(err)
	}
	rows := make([]pendingLine, len(list))
	for i, p := range list {
		rows[i] = pendingLine(p)
	}
	return writePending(stdout, format, rows)
}
