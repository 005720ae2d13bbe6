package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store"
)

type verifyParams struct {
	*globalParams
	format string
}

func newVerifyCmd(g *globalParams) *cobra.Command {
	p := verifyParams{globalParams: g}
	cmd := &cobra.Command{
		Use:   "verify AGENT|FILE",
		Short: "Verify a log's hash chain",
		Long: `Verify recomputes a log's hash chain from genesis and checks its shape
(genesis, policy, then actions and approvals, nothing after a termination).
The argument is a log file (e.g. a copy of .lineage/agt_….jsonl) if such a file
exists, otherwise an agent id in the data directory. A final line without its
newline in a file is a write torn by a crash: it is ignored, with a warning.

It prints "ok: N records, head sha256:…", or "damaged at seq N: reason" naming
the first bad record. --format json prints {ok, records, head, bad_seq, reason}.
` + exitCodesHelp + `
verify exits 0 when the log is intact, 1 when it is damaged or on errors.`,
		Args: argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runVerify(p, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	addFormatFlag(cmd, &p.format, formatText, formatJSON)
	return cmd
}

type verifyResult struct {
	OK      bool    `json:"ok"`
	Records int     `json:"records"`
	Head    string  `json:"head"`
	BadSeq  *uint64 `json:"bad_seq,omitempty"`
	Reason  string  `json:"reason,omitempty"`
}

func runVerify(p verifyParams, args []string, stdout, stderr io.Writer) error {
	if err := checkFormat(p.format, formatText, formatJSON); err != nil {
		return err
	}
	target := args[0]
	if c, err := p.remote(); c != nil || err != nil {
		if err != nil {
			return err
		}
		return remoteVerify(context.Background(), c, target, p.format, stdout)
	}
	var (
		recs []lineage.Record
		err  error
	)
	info, serr := os.Stat(target)
	switch {
	case serr == nil && info.IsDir():
		return fmt.Errorf("%s is a directory; verify takes a log file or an agent id", target)
	case serr == nil:
		recs, err = verifyFile(target, stderr)
	case looksLikePath(target):
		return serr
	default:
		s, oerr := openSession(p.globalParams, readData)
		if oerr != nil {
			return oerr
		}
		defer s.close(stderr)
		recs, _, err = readLog(s, target)
		if err != nil && !isDamage(err) {
			return s.agentError(target, err)
		}
	}
	res := verifyResult{OK: true, Records: len(recs)}
	if len(recs) > 0 {
		res.Head = recs[len(recs)-1].Hash
	}
	var chain *runtime.ChainError
	var damage *store.DamageError
	switch {
	case errors.As(err, &chain):
		res.OK, res.BadSeq, res.Reason = false, &chain.Seq, chain.Reason
	case errors.As(err, &damage):
		res.OK, res.BadSeq, res.Reason = false, &damage.Seq, damage.Reason
	case err != nil:
		return err
	case len(recs) < 2:
		// A log is at least genesis and policy (an empty file is a Create
		// whose first append never happened).
		seq := uint64(len(recs))
		res.OK, res.BadSeq, res.Reason = false, &seq, "log ends before its policy record"
	}
	return writeVerifyResult(stdout, p.format, res)
}

// looksLikePath tells a file name from an agent id (which has no path
// separator and no .jsonl suffix), for a target that does not exist.
func looksLikePath(s string) bool {
	return strings.ContainsRune(s, '/') || strings.ContainsRune(s, os.PathSeparator) || strings.HasSuffix(s, store.Ext)
}

func isDamage(err error) bool {
	var chain *runtime.ChainError
	var damage *store.DamageError
	return errors.As(err, &chain) || errors.As(err, &damage)
}

// verifyFile verifies a log file's lines, read by the store's own rules
// (store.ScanFile): a final segment that is not a whole record is a torn tail,
// ignored as the store ignores it and reported on stderr.
func verifyFile(path string, stderr io.Writer) ([]lineage.Record, error) {
	var torn int64
	recs, err := runtime.VerifyLog(func(fn func(uint64, []byte) error) error {
		var err error
		torn, err = store.ScanFile(path, fn)
		return err
	}, compileLogged)
	if torn > 0 {
		fmt.Fprintf(stderr, "lineagec: %s: ignoring a torn last line (%d bytes without a newline)\n", path, torn)
	}
	return recs, err
}
