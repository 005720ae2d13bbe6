package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/checkpoint"
)

type checkpointParams struct {
	*globalParams
	key, out string
	noteOnly bool
}

func newCheckpointCmd(g *globalParams) *cobra.Command {
	p := checkpointParams{globalParams: g}
	cmd := &cobra.Command{
		Use:   "checkpoint AGENT|FILE --key FILE | checkpoint AGENT --server URL",
		Short: "Sign a checkpoint of a log",
		Long: `Checkpoint signs the state of a log with an Ed25519 key from
lineagec key generate: a C2SP signed note whose text is a tlog-checkpoint
(origin lineage/<agent>, the number of records, the RFC 6962 Merkle root of the
records' hashes, and "head <hash>"). Keep it away from the machine that writes
the logs; lineagec verify --checkpoint then proves that the log is still the
one signed, or an extension of it, and names the first seq where it is not.

It prints the note, a blank line and the hashes of the records it covers, one
a line: the list is not signed but checked against the signed root, and lets
verify name the first changed record. --note-only prints the note alone (what
a witness cosigns). The argument is a log file or an agent id, as for verify;
a damaged log is not signed.

With --server URL (or $LINEAGE_SERVER) it prints the server's own checkpoint of
the agent, signed with its serve --checkpoint-key: the note alone (--key is
refused; verify it with the server's public key).

verify --checkpoint prints "ok: …" when the log is the checkpoint's or extends
it, else "diverges at seq N: reason" (with the bare note a changed record can
only be placed in a range: "diverges at seq 0..N-1") and exits 1. Its --format
json prints {ok, agent, records, checkpoint_size, diverges_at, diverges_by,
reason, list_ignored, head, signer}. A checkpoint signed by another key is the
error checkpoint_wrong_key; a damaged one checkpoint_damaged.
` + exitCodesHelp,
		Args: argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCheckpoint(p, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&p.key, "key", "", "private signing key file (from lineagec key generate)")
	cmd.Flags().StringVarP(&p.out, "output", "o", "", "write the checkpoint to this file instead of stdout")
	cmd.Flags().BoolVar(&p.noteOnly, "note-only", false, "the signed note without the record list")
	return cmd
}

func runCheckpoint(p checkpointParams, args []string, stdout, stderr io.Writer) error {
	if c, err := p.remote(); err != nil || c != nil {
		if err != nil {
			return err
		}
		return remoteCheckpoint(c, p, args[0], stdout)
	}
	skey, err := readKeyFile("--key", p.key)
	if err != nil {
		return err
	}
	signer, err := checkpoint.NewSigner(skey)
	if err != nil {
		return fmt.Errorf("--key %s: %w", p.key, err)
	}
	recs, err := loadLog(p.globalParams, args[0], stderr)
	if err != nil {
		return err
	}
	msg, err := checkpoint.SignRecords(recs, signer)
	if err != nil {
		return err
	}
	if !p.noteOnly {
		msg = checkpoint.Bundle(msg, recs)
	}
	if p.out == "" {
		_, err = stdout.Write(msg)
		return err
	}
	return os.WriteFile(p.out, msg, 0o644)
}

// loadLog reads and verifies a log given as a file or an agent id (as verify
// takes it); a damaged log is an error naming its first bad seq.
func loadLog(g *globalParams, target string, stderr io.Writer) ([]lineage.Record, error) {
	info, serr := os.Stat(target)
	var (
		recs []lineage.Record
		err  error
	)
	switch {
	case serr == nil && info.IsDir():
		return nil, fmt.Errorf("%s is a directory, not a log file or an agent id", target)
	case serr == nil:
		recs, err = verifyFile(target, stderr)
	case looksLikePath(target):
		return nil, serr
	default:
		s, oerr := openSession(g, readData)
		if oerr != nil {
			return nil, oerr
		}
		defer s.close(stderr)
		if recs, _, err = readLog(s, target); err != nil && !isDamage(err) {
			return nil, s.agentError(target, err)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: the log is damaged (lineagec verify shows where): %w", target, err)
	}
	if len(recs) < 2 {
		return nil, fmt.Errorf("%s: the log ends before its policy record", target)
	}
	return recs, nil
}

// checkpointResult is verify --checkpoint's JSON.
type checkpointResult struct {
	checkpoint.Result
	Head   string `json:"head"`
	Signer string `json:"signer"`
}

// verifyCheckpoint is verify --checkpoint --pubkey on a log whose chain verified.
func verifyCheckpoint(p verifyParams, recs []lineage.Record, stdout io.Writer) error {
	vkey, err := readKeyFile("--pubkey", p.pubkey)
	if err != nil {
		return err
	}
	v, err := checkpoint.NewVerifier(vkey)
	if err != nil {
		return fmt.Errorf("--pubkey %s: %w", p.pubkey, err)
	}
	file, err := os.ReadFile(p.checkpoint)
	if err != nil {
		return fmt.Errorf("--checkpoint: %w", err)
	}
	msg, hashes, err := checkpoint.Unbundle(file)
	if err != nil {
		return fmt.Errorf("--checkpoint %s: %w", p.checkpoint, err)
	}
	c, err := checkpoint.Open(msg, v)
	if err != nil {
		return fmt.Errorf("--checkpoint %s: %w", p.checkpoint, err)
	}
	res := checkpointResult{Result: checkpoint.Verify(recs, c, hashes), Head: recs[len(recs)-1].Hash,
		Signer: fmt.Sprintf("%s+%08x", v.Name(), v.KeyHash())}
	if p.format == formatJSON {
		if err := writeJSONIndent(stdout, res); err != nil {
			return err
		}
	} else {
		if res.ListIgnored != "" {
			fmt.Fprintf(stdout, "warning: the checkpoint's record list is ignored: %s\n", res.ListIgnored)
		}
		switch {
		case res.OK && res.Records == res.Size:
			fmt.Fprintf(stdout, "ok: %d records, head %s; the checkpoint signed by %s covers them all\n", res.Records, res.Head, res.Signer)
		case res.OK:
			fmt.Fprintf(stdout, "ok: %d records, head %s; extends the checkpoint of %d records signed by %s\n", res.Records, res.Head, res.Size, res.Signer)
		case *res.Seq == *res.Upto:
			fmt.Fprintf(stdout, "diverges at seq %d: %s\n", *res.Seq, res.Reason)
		default:
			fmt.Fprintf(stdout, "diverges at seq %d..%d: %s\n", *res.Seq, *res.Upto, res.Reason)
		}
	}
	if !res.OK {
		return &exitError{code: exitFailure}
	}
	return nil
}
