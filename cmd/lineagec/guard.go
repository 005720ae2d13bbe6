package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/api"
	"github.com/lineage-guard/lineage/client"
)

// The agent commands stand on one interface, guard: the store in the data
// directory (or --store) through the runtime (local.go), or, with --server
// URL (or $LINEAGE_SERVER) and $LINEAGE_TOKEN, a lineagec serve through the
// Go client (docs/service.md). Both answer in the api's types, so each
// command has one body, and its output and exit status are the same either
// way.

// guard is what an agent command calls: *client.Client, or *localGuard.
type guard interface {
	// CreateAgent creates an agent under a normalized policy document.
	CreateAgent(ctx context.Context, policy json.RawMessage, name, parent string) (api.Created, error)
	AgentsPage(ctx context.Context, p client.Page) ([]api.Agent, string, error)
	State(ctx context.Context, agent string) (lineage.State, error)
	Policy(ctx context.Context, agent string) (digest string, policy json.RawMessage, err error)
	Request(ctx context.Context, agent string, req lineage.Request) (lineage.Verdict, error)
	ApproveWithNote(ctx context.Context, agent, id, note string) (lineage.Verdict, error)
	RejectWithNote(ctx context.Context, agent, id, note string) (lineage.Verdict, error)
	Terminate(ctx context.Context, agent, reason string) (lineage.State, error)
	// Log returns the log's records from seq from on, one JSON line each,
	// byte for byte as stored.
	Log(ctx context.Context, agent string, from uint64) ([]byte, error)
	Verify(ctx context.Context, agent string) (api.VerifyResult, error)
	PendingPage(ctx context.Context, p client.Page) ([]api.Pending, string, error)
}

var (
	_ guard = (*client.Client)(nil)
	_ guard = (*localGuard)(nil)
)

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

// openGuard returns the guard of an agent command and its closer: the
// server's client, or the local store opened as how says, where by names
// who approves, rejects or terminates (--by; the token names them on a
// server).
func (g *globalParams) openGuard(how access, by string, stderr io.Writer) (guard, func(), error) {
	c, err := g.remote()
	if err != nil {
		return nil, nil, err
	}
	if c != nil {
		return c, func() {}, nil
	}
	s, err := openSession(g, how)
	if err != nil {
		return nil, nil, err
	}
	return &localGuard{s: s, by: by, stderr: stderr}, func() { s.close(stderr) }, nil
}

// readable makes an error of either guard read the same: a server's error
// with the problems of an invalid policy, one a line, as check prints them.
func readable(err error) error {
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

// firstRows reads a list's pages until limit rows (0: all).
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
