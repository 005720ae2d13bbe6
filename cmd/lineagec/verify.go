package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/api"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store/file"
	"github.com/lineage-guard/lineage/server"
)

type verifyParams struct {
	*globalParams
	format             string
	checkpoint, pubkey string // verify --checkpoint (checkpoint.go)
}

func newVerifyCmd(g *globalParams) *cobra.Command {
	p := verifyParams{globalParams: g}
	cmd := &cobra.Command{
		Use:   "verify AGENT|FILE",
		Short: "Verify a log's hash chain",
		Long: `Verify recomputes a log's hash chain from genesis and checks its shape
(genesis, policy, then actions and approvals, nothing after a termination).
The argument is a log file (e.g. a copy of .lineage/agt_….jsonl) if such a file
exists, otherwise an agent id in the data directory (or, with --store, in the
PostgreSQL store). A final line without its
newline in a file is a write torn by a crash: it is ignored, with a warning.

It prints "ok: N records, head sha256:…", or "damaged at seq N: reason" naming
the first bad record. --format json prints {ok, records, head, seq, message},
as GET /v1/agents/{agent}/verify answers (seq and message only when not ok).

With --checkpoint FILE --pubkey FILE (from lineagec checkpoint and key
generate) an intact log must also be the checkpoint's log or an extension of
it; otherwise verify prints "diverges at seq N: reason" (see checkpoint --help).
` + exitCodesHelp + `
verify exits 0 when the log is intact, 1 when it is damaged or on errors.`,
		Args: argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runVerify(p, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	addFormatFlag(cmd, &p.format, formatText, formatJSON)
	cmd.Flags().StringVar(&p.checkpoint, "checkpoint", "", "signed checkpoint the log must match or extend (needs --pubkey)")
	cmd.Flags().StringVar(&p.pubkey, "pubkey", "", "public key that signed the checkpoint")
	return cmd
}

func runVerify(p verifyParams, args []string, stdout, stderr io.Writer) error {
	if err := checkFormat(p.format, formatText, formatJSON); err != nil {
		return err
	}
	if (p.checkpoint == "") != (p.pubkey == "") {
		return fmt.Errorf("--checkpoint and --pubkey go together")
	}
	target := args[0]
	var (
		res  api.VerifyResult
		recs []lineage.Record
		err  error
	)
	info, serr := os.Stat(target)
	switch remote := p.serverURL() != ""; {
	case remote && p.checkpoint != "":
		return fmt.Errorf("--checkpoint checks a local log: export it with `lineagec log %s > %s.jsonl` and verify that file", target, target)
	case remote:
		g, _, err := p.openGuard(readData, "", stderr)
		if err != nil {
			return err
		}
		if res, err = g.Verify(context.Background(), target); err != nil {
			return readable(err)
		}
	case serr == nil && info.IsDir():
		return fmt.Errorf("%s is a directory; verify takes a log file or an agent id", target)
	case serr == nil:
		recs, err = verifyFile(target, stderr)
		if res, err = server.VerifyResultOf("", recs, err, nil); err != nil {
			return err
		}
	case looksLikePath(target):
		return serr
	default:
		g, done, err := p.openGuard(readData, "", stderr)
		if err != nil {
			return err
		}
		defer done()
		if res, recs, err = g.(*localGuard).verify(target); err != nil {
			return err
		}
	}
	if res.OK && p.checkpoint != "" {
		return verifyCheckpoint(p, recs, stdout)
	}
	return writeVerifyResult(stdout, p.format, res)
}

// writeVerifyResult prints a verify result and picks the exit status.
func writeVerifyResult(stdout io.Writer, format string, res api.VerifyResult) error {
	if format == formatJSON {
		if err := writeJSONIndent(stdout, res); err != nil {
			return err
		}
	} else if res.OK {
		fmt.Fprintf(stdout, "ok: %d records, head %s\n", deref(res.Records), res.Head)
	} else {
		fmt.Fprintf(stdout, "damaged at seq %d: %s\n", deref(res.Seq), res.Message)
	}
	if !res.OK {
		return &exitError{code: exitFailure}
	}
	return nil
}

// looksLikePath tells a file name from an agent id (which has no path
// separator and no .jsonl suffix), for a target that does not exist.
func looksLikePath(s string) bool {
	return strings.ContainsRune(s, '/') || strings.ContainsRune(s, os.PathSeparator) || strings.HasSuffix(s, file.Ext)
}

func isDamage(err error) bool {
	_, _, ok := damageOf(err)
	return ok
}

// verifyFile verifies a log file's lines, read by the store's own rules
// (file.ScanFile): a final segment that is not a whole record is a torn tail,
// ignored as the store ignores it and reported on stderr.
func verifyFile(path string, stderr io.Writer) ([]lineage.Record, error) {
	var torn int64
	recs, err := runtime.VerifyLog(func(fn func(uint64, []byte) error) error {
		var err error
		torn, err = file.ScanFile(path, fn)
		return err
	}, compileLogged)
	if torn > 0 {
		fmt.Fprintf(stderr, "lineagec: %s: ignoring a torn last line (%d bytes without a newline)\n", path, torn)
	}
	return recs, err
}

// deref is *n, or 0 for nil (a server's answer that left the field out).
func deref[T int | uint64](n *T) T {
	if n == nil {
		return 0
	}
	return *n
}
