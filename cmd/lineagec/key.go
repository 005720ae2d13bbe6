package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage/checkpoint"
)

func newKeyCmd(g *globalParams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "key",
		Short: "Make the keys that sign checkpoints",
		Args:  argsUsage(cobra.NoArgs),
	}
	cmd.AddCommand(newKeyGenerateCmd(g))
	return cmd
}

type keyGenerateParams struct {
	name, private, public string
}

func newKeyGenerateCmd(*globalParams) *cobra.Command {
	var p keyGenerateParams
	cmd := &cobra.Command{
		Use:   "generate",
		Short: "Write an Ed25519 key pair for signing checkpoints",
		Long: `Generate writes a new Ed25519 key pair as note keys (C2SP signed-note):
the private signing key (PRIVATE+KEY+<name>+<hash>+<key>) to --private, readable
by its owner only (0600), and the public verifier key (<name>+<hash>+<key>) to
--public. It never overwrites a file. Keep the private key on the machine that
signs; give the public key to whoever verifies (docs/history.md).
` + exitCodesHelp,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runKeyGenerate(p, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&p.name, "name", "lineage", "key name (no spaces or '+'), shown in each signature line")
	cmd.Flags().StringVar(&p.private, "private", "checkpoint.key", "file for the private signing key (written 0600)")
	cmd.Flags().StringVar(&p.public, "public", "checkpoint.pub", "file for the public verifier key")
	return cmd
}

func runKeyGenerate(p keyGenerateParams, stdout io.Writer) error {
	skey, vkey, err := checkpoint.GenerateKey(p.name)
	if err != nil {
		return err
	}
	if p.private == p.public {
		return fmt.Errorf("--private and --public name the same file %s", p.private)
	}
	if err := writeNew(p.public, vkey+"\n", 0o644); err != nil {
		return err
	}
	if err := writeNew(p.private, skey+"\n", 0o600); err != nil {
		os.Remove(p.public)
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (private, 0600) and %s (public: %s)\n", p.private, p.public, vkey)
	return nil
}

// writeNew writes a file that must not exist yet, with the given mode.
func writeNew(path, text string, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s exists; key generate never overwrites a key", path)
	}
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	return f.Close()
}

// readKeyFile reads a key file for a flag.
func readKeyFile(flag, path string) (string, error) {
	if path == "" {
		return "", fmt.Errorf("%s is required", flag)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	return string(b), nil
}
