package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store"
	"github.com/lineage-guard/lineage/runtime/store/file"
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
the first bad record. --format json prints {ok, records, head, bad_seq, reason}.

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
	if (p.checkpoint == "") != (p.pubkey == "") {
		return fmt.Errorf("--checkpoint and --pubkey go together")
	}
	target := args[0]
	if c, err := p.remote(); c != nil || err != nil {
		if err != nil {
			return err
		}
		if p.checkpoint != "" {
			return fmt.Errorf("--checkpoint checks a local log: export it with `lineagec log %s > %s.jsonl` and verify that file", target, target)
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
		// The store's indexes serve lists only, never a verdict: a
		// difference is a warning (docs/decisions.md: verify checks the
		// index).
		if c, ok := s.st.(store.IndexChecker); ok && err == nil {
			diff, cerr := c.CheckIndexOf(target)
			if cerr != nil {
				return cerr
			}
			for _, d := range diff {
				fmt.Fprintf(stderr, "warning: the store's index differs from the log: %s (it is read again from the logs when the store next opens with the log changed, or without %s)\n", d, file.IndexName)
			}
		}
		if err == nil {
			// A log shorter than a checkpoint a server signed of it is
			// not ok (D252 (the signed size checked when an agent is met)).
			if m, ok := s.st.(store.Marks); ok {
				mark, merr := m.LoadMark(target)
				if merr != nil && !isDamage(merr) {
					return merr
				}
				err = merr
				if why := mark.Shortfall(uint64(len(recs)), func(seq uint64) string { return recs[seq].Hash }); merr == nil && why != "" {
					seq := min(uint64(len(recs)), mark.Size-1)
					res := verifyResult{Records: len(recs), BadSeq: &seq, Reason: "checkpoint_diverged: " + why}
					if len(recs) > 0 {
						res.Head = recs[len(recs)-1].Hash
					}
					return writeVerifyResult(stdout, p.format, res)
				}
			}
		}
	}
	res := verifyResult{OK: true, Records: len(recs)}
	if len(recs) > 0 {
		res.Head = recs[len(recs)-1].Hash
	}
	seq, reason, damaged := damageOf(err)
	switch {
	case damaged:
		res.OK, res.BadSeq, res.Reason = false, &seq, reason
	case err != nil:
		return err
	case len(recs) < 2:
		// A log is at least genesis and policy (an empty file is a Create
		// whose first append never happened).
		seq := uint64(len(recs))
		res.OK, res.BadSeq, res.Reason = false, &seq, "log ends before its policy record"
	}
	if res.OK && p.checkpoint != "" {
		return verifyCheckpoint(p, recs, stdout)
	}
	return writeVerifyResult(stdout, p.format, res)
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
