// Command lineagec is lineage's command line: it checks and compiles policies,
// creates agents on the embedded store (or on the PostgreSQL store that serve
// nodes share, --store), decides their requests, keeps, exports and verifies
// their logs, and runs conformance suites.
//
// Exit status, the same for every command:
//
//	code  meaning
//	0     ok: the command did its job; a request or approval was allowed;
//	      every policy is valid; a log is intact; every test passed
//	1     error: bad input (malformed request or args, unknown agent, id
//	      conflict, bad flags; nothing was recorded), an invalid policy, a log
//	      that fails verification, a failed or empty test run, I/O errors
//	2     deny: a request (or an approval or rejection) was decided and denied
//	3     pending: a request was recorded and awaits a person's approval
//
// Errors print on stderr as "lineagec: <message>". Every subcommand lives in
// its own file as a params struct and a plain run function; this file only
// builds the command tree and maps errors to exit codes.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/lineage-guard/lineage/internal/source"
)

// Exit codes (see the table above).
const (
	exitOK      = 0
	exitFailure = 1
	exitDeny    = 2
	exitPending = 3
)

// exitCodesHelp is appended to every command's help.
const exitCodesHelp = `
Exit status: 0 ok/allow/valid/intact/all passed, 1 error (nothing recorded),
2 deny, 3 pending.`

// exitError makes a run function end with a chosen exit status. A nil err
// exits silently: the command already printed its result.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// globalParams are the persistent flags every command sees.
type globalParams struct {
	data        string        // --data; "" means $LINEAGE_DATA, else ./.lineage
	store       string        // --store; "" means $LINEAGE_STORE unless --data is given (store.go)
	lockTimeout time.Duration // --lock-timeout: how long to wait for the data directory's lock
	stderr      io.Writer     // where a wait for the lock is announced
	srv         remoteParams  // --server (remote.go)
}

// dataDir resolves the data directory of the agent commands.
func (g *globalParams) dataDir() string {
	if g.data != "" {
		return g.data
	}
	if v := os.Getenv("LINEAGE_DATA"); v != "" {
		return v
	}
	return ".lineage"
}

// commands are the subcommands of lineagec, in help order. To add one, write
// its file with a constructor and list the constructor here.
var commands = []func(*globalParams) *cobra.Command{
	newCheckCmd,
	newAnalyzeCmd,
	newCompileCmd,
	newSchemaCmd,
	newAgentCmd,
	newRequestCmd,
	newExplainCmd,
	newApproveCmd,
	newRejectCmd,
	newTerminateCmd,
	newStateCmd,
	newLogCmd,
	newVerifyCmd,
	newKeyCmd,
	newCheckpointCmd,
	newReplayCmd,
	newTestCmd,
	newBenchCmd,
	newVersionCmd,
	newStoreCmd,
	newServeCmd,
	newTokenCmd,
	newPendingCmd,
	newMCPCmd,
	newHookCmd,
	newBackupCmd,
	newRestoreCmd,
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	g := &globalParams{stderr: stderr}
	root := &cobra.Command{
		Use:   "lineagec",
		Short: "Guard AI agents with policies and hash-chained logs",
		Long: `lineagec checks and compiles lineage policies, guards agents on the embedded
store (one hash-chained JSON-lines log per agent in the data directory, --data)
or on a PostgreSQL store shared with serve nodes (--store), and runs
conformance suites.` + "\n" + exitCodesHelp,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.PersistentFlags().StringVar(&g.data, "data", "",
		"data directory of the agent logs (default $LINEAGE_DATA, else ./.lineage)")
	root.PersistentFlags().DurationVar(&g.lockTimeout, "lock-timeout", 10*time.Second,
		"how long to wait for another process to release the data directory (0: do not wait)")
	addRemoteFlags(root, g)
	addStoreFlag(root, g)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w%s\nusage: %s (see %s --help)", err, flagSuggestion(c, err), c.UseLine(), c.CommandPath())
	})
	for _, newCmd := range commands {
		root.AddCommand(newCmd(g))
	}
	return root
}

// run executes lineagec with args and returns the exit status.
func run(args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "lineagec: internal error: %v\n", r)
			if os.Getenv("LINEAGE_TRACEBACK") != "" {
				stderr.Write(debug.Stack())
			} else {
				fmt.Fprintln(stderr, "lineagec: this is a bug; set LINEAGE_TRACEBACK=1 to see where it happened")
			}
			code = exitFailure
		}
	}()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	return exitCode(root.ExecuteContext(ctx), stderr)
}

// exitCode prints err (if it has a message) and chooses the exit status.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	code := exitFailure
	var ee *exitError
	if errors.As(err, &ee) {
		code, err = ee.code, ee.err
	}
	if err != nil {
		fmt.Fprintf(stderr, "lineagec: %s\n", strings.TrimRight(err.Error(), "\n"))
		if code == exitOK {
			code = exitFailure
		}
	}
	return code
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// flagSuggestion is cobra's "Did you mean this?" for a mistyped command,
// given to a mistyped long flag: the command's flag (its own or inherited)
// closest to the unknown one, by the edit distance of unknown policy fields;
// or "". D302 (did you mean, for flags).
func flagSuggestion(c *cobra.Command, err error) string {
	name, ok := strings.CutPrefix(err.Error(), "unknown flag: --")
	if !ok {
		return ""
	}
	name, _, _ = strings.Cut(name, "=")
	var known []string
	c.Flags().VisitAll(func(f *pflag.Flag) { known = append(known, f.Name) })
	c.InheritedFlags().VisitAll(func(f *pflag.Flag) { known = append(known, f.Name) })
	s := source.Suggest(name, known)
	if s == "" {
		return ""
	}
	return "\n\nDid you mean this?\n\t--" + s + "\n"
}
