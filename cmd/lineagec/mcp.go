package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/mcpproxy"
)

// mcpParams are the flags of `lineagec mcp` (docs/mcp.md).
type mcpParams struct {
	*globalParams
	token    string
	upstream string
	listen   string
	wait     time.Duration
	stateDir string
}

func newMCPCmd(g *globalParams) *cobra.Command {
	p := mcpParams{globalParams: g}
	cmd := &cobra.Command{
		Use:   "mcp --server URL [--token TOKEN] [--listen ADDR] (--upstream URL | -- CMD [ARG…])",
		Short: "Guard an MCP server's tools: every tools/call is a request of an agent",
		Long: `mcp is an MCP proxy. It starts the upstream MCP server CMD as a subprocess (its
stderr passes through to ours), or talks to a streamable-HTTP one (--upstream),
and serves MCP to a host on stdio, or as streamable HTTP on --listen ADDR.

The token (--token, default $LINEAGE_TOKEN) is an agent's. tools/list shows the
upstream tools that the agent's policy can admit; every tools/call is a request
of that agent to the guard service at --server (default $LINEAGE_SERVER):
allowed calls are forwarded and their results come back unchanged; denials come
back as isError results a model can read, with _meta["lineage/verdict"]; a call
that needs approval waits up to --approval-wait for a person (lineagec approve),
and a later call with the same tool and args goes on waiting for the same
request. A tool rule's pin that no longer matches the upstream's definition
hides the tool and refuses its calls. When the service cannot be reached,
nothing is forwarded.

Nothing but MCP goes to stdout; reports go to stderr. The calls waiting for
an approval are kept in --state-dir (default: the user's cache directory,
lineage/mcp), so that an approved call is forwarded at most once, even when the
proxy restarts.

  lineagec mcp pins -- CMD [ARG…]   prints the upstream tools' pins.
` + exitCodesHelp,
		Args: argsUsage(cobra.ArbitraryArgs),
		// The root's checks refuse --server for commands they do not list;
		// the proxy takes --server, and opens no store itself (D222: 'lineagec mcp' refuses '--store' and '--data').
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			for _, name := range []string{"store", "data"} {
				if cmd.Flags().Changed(name) {
					return fmt.Errorf("%s opens no store (--%s): the proxy asks the guard service at --server, which keeps the logs", cmd.CommandPath(), name)
				}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runMCP(cmd.Context(), p, args, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.token, "token", "", "the agent's token (default $LINEAGE_TOKEN)")
	f.StringVar(&p.upstream, "upstream", "", "URL of a streamable-HTTP upstream MCP server, instead of CMD")
	f.StringVar(&p.listen, "listen", "", "serve streamable HTTP on ADDR (host:port) instead of stdio")
	f.DurationVar(&p.wait, "approval-wait", mcpproxy.DefaultApprovalWait, "how long a call that needs approval waits for it")
	f.StringVar(&p.stateDir, "state-dir", "", "where the calls waiting for approval are kept (default: user cache dir, lineage/mcp)")
	cmd.AddCommand(newMCPPinsCmd(g))
	return cmd
}

// upstreamTransport is the transport to CMD (stderr passed through) or to --upstream.
func upstreamTransport(upstream string, args []string, stderr io.Writer) (mcp.Transport, error) {
	switch {
	case upstream != "" && len(args) > 0:
		return nil, errors.New("give either --upstream URL or -- CMD [ARG…], not both")
	case upstream != "":
		return &mcp.StreamableClientTransport{Endpoint: upstream}, nil
	case len(args) == 0:
		return nil, errors.New("no upstream MCP server: give -- CMD [ARG…] or --upstream URL")
	}
	c := exec.Command(args[0], args[1:]...)
	c.Stderr = stderr
	return &mcp.CommandTransport{Command: c}, nil
}

func runMCP(ctx context.Context, p mcpParams, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	srv := p.serverURL()
	if srv == "" {
		return errors.New("lineagec mcp needs the guard service: --server URL or $LINEAGE_SERVER")
	}
	tok := p.token
	if tok == "" {
		tok = os.Getenv("LINEAGE_TOKEN")
	}
	if tok == "" {
		return errors.New("lineagec mcp needs an agent's token: --token or $LINEAGE_TOKEN")
	}
	guard, err := client.New(srv, tok, nil)
	if err != nil {
		return err
	}
	up, err := upstreamTransport(p.upstream, args, stderr)
	if err != nil {
		return err
	}
	mcpproxy.SetGCPercent() // the proxy's latency (D163: 'lineagec mcp' runs its GC at 400 %)
	proxy, err := mcpproxy.New(ctx, mcpproxy.Config{Guard: guard, Upstream: up, ApprovalWait: p.wait,
		StateDir: p.stateDir, Stderr: stderr})
	if err != nil {
		return err
	}
	defer proxy.Close()
	if p.listen == "" {
		err = proxy.Run(ctx, &mcp.IOTransport{Reader: io.NopCloser(stdin), Writer: nopWriteCloser{stdout}})
		if errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	ln, err := net.Listen("tcp", p.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	fmt.Fprintf(stderr, "lineagec mcp: agent %s; serving MCP on http://%s/\n", proxy.Agent(), ln.Addr())
	hs := &http.Server{Handler: proxy.Handler(),
		ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

func newMCPPinsCmd(g *globalParams) *cobra.Command {
	var upstream string
	cmd := &cobra.Command{
		Use:   "pins (--upstream URL | -- CMD [ARG…])",
		Short: "Print the pins of an MCP server's tools as a policy fragment",
		Long: `pins connects to the MCP server CMD (or --upstream URL), lists its tools and
prints, for each, a tool rule with its pin: the sha256 of the canonical JSON of
its whole definition, every member the server sent. A tool not annotated
readOnlyHint: true is printed with requires_approval: true. Paste the rules
into a policy's tools and set their costs; the proxy then refuses a tool whose
definition changes, and sends the host exactly the definition pinned.
` + exitCodesHelp,
		Args: argsUsage(cobra.ArbitraryArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runMCPPins(cmd.Context(), upstream, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&upstream, "upstream", "", "URL of a streamable-HTTP MCP server, instead of CMD")
	return cmd
}

func runMCPPins(ctx context.Context, upstream string, args []string, stdout, stderr io.Writer) error {
	t, err := upstreamTransport(upstream, args, stderr)
	if err != nil {
		return err
	}
	defs, err := mcpproxy.ListDefinitions(ctx, t, &mcp.Implementation{Name: "lineagec-mcp-pins", Version: mcpproxy.Version})
	if err != nil {
		return err
	}
	return mcpproxy.WritePins(stdout, defs)
}
