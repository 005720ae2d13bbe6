package main

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/policy"
	"github.com/lineage-guard/lineage/runtime/backup"
	"github.com/lineage-guard/lineage/runtime/store"
	"github.com/lineage-guard/lineage/runtime/store/file"
)

// backup and restore (docs/operations.md, "Backups").

func newBackupCmd(g *globalParams) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "backup -o FILE.tar [--data DIR | --server URL]",
		Short: "Copy the data directory's logs, consistently, into a tar",
		Long: `Backup writes a consistent copy of the store into FILE.tar: every agent's log
(a prefix of the live log, cut at a record boundary, holding every record
acknowledged before the backup began), the checkpoint marks and the notes of
lost records, and last a manifest naming each log's records and head.
The server key and the auth file are not in it (keep them with your secrets).

While serve runs it holds the data directory: back up through it with
--server URL (GET /v1/backup, an admin token in $LINEAGE_TOKEN). Without
serve, --data DIR is read under a shared lock (serve cannot start meanwhile).
With PostgreSQL (--store), back up with pg_dump.

The file appears whole or not at all. ` + "`lineagec restore`" + ` makes a data directory of it.
` + exitCodesHelp,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBackup(cmd.Context(), g, out, cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "the tar file to write (required)")
	return cmd
}

func newRestoreCmd(g *globalParams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "restore FILE.tar --data DIR",
		Short: "Make a data directory of a backup",
		Long: `Restore makes the data directory --data DIR (new, or empty: a directory that
holds files is refused) of a backup made by ` + "`lineagec backup`" + ` or GET /v1/backup.
Every log is verified (chain, canonical form, the fold's checks, the policy's
digest) and checked against the manifest before the directory appears; on any
error nothing is made. Give the restored directory the server key (and auth
file) of the service the backup came from, or agents' tokens will not verify.
` + exitCodesHelp,
		Args: argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRestore(args[0], g.dataDir(), cmd.OutOrStdout())
		},
	}
	return cmd
}

func runBackup(ctx context.Context, g *globalParams, out string, stderr io.Writer) error {
	if out == "" {
		return errors.New("backup needs -o FILE.tar")
	}
	if g.storeURL() != "" {
		return errors.New("backup copies the file store; back up a PostgreSQL store with pg_dump (docs/operations.md, Backups)")
	}
	dir := filepath.Dir(out)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(out)+".tmp-*")
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	var m backup.Manifest
	if u := g.serverURL(); u != "" {
		if err := fetchBackup(ctx, u, tmp); err != nil {
			return err
		}
		if m, err = readManifest(tmp); err != nil {
			return fmt.Errorf("the server's backup: %w", err)
		}
	} else {
		data := g.dataDir()
		st, err := file.Open(data, file.Options{ReadOnly: true})
		if errors.Is(err, file.ErrLocked) {
			return fmt.Errorf("%w\nserve holds %s: back it up through the server: lineagec backup --server URL -o %s (GET /v1/backup; an admin token in $LINEAGE_TOKEN)", err, data, out)
		}
		if err != nil {
			return err
		}
		m, err = backup.Write(ctx, tmp, backup.Source{Store: st, Marks: st, Dir: data})
		if cerr := st.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return err
	}
	done = true
	var recs uint64
	for _, e := range m.Agents {
		recs += e.Records
		if e.Damage != "" {
			fmt.Fprintf(stderr, "lineagec: warning: %s: the store stopped reading the log: %s; the backup holds its %d records before that\n", e.Agent, e.Damage, e.Records)
		}
	}
	fmt.Fprintf(stderr, "lineagec: backed up %d agents (%d records) to %s\n", len(m.Agents), recs, out)
	return nil
}

// fetchBackup writes GET /v1/backup of the server at base to w.
func fetchBackup(ctx context.Context, base string, w io.Writer) error {
	tok := os.Getenv("LINEAGE_TOKEN")
	if tok == "" {
		return errors.New("backing up through a server needs an admin token in $LINEAGE_TOKEN")
	}
	req, err := http.NewRequestWithContext(ctx, "GET", strings.TrimSuffix(base, "/")+"/v1/backup", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, ResponseHeaderTimeout: time.Minute}}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return fmt.Errorf("GET /v1/backup: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("GET /v1/backup: the stream broke: %w", err)
	}
	return nil
}

// readManifest reads f from the start and returns the manifest its last
// entry must be.
func readManifest(f *os.File) (backup.Manifest, error) {
	var m backup.Manifest
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return m, err
	}
	tr := tar.NewReader(f)
	last := ""
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return m, fmt.Errorf("not a whole tar: %w", err)
		}
		last = h.Name
		if h.Name == backup.ManifestName {
			if err := json.NewDecoder(tr).Decode(&m); err != nil {
				return m, err
			}
		}
	}
	if last != backup.ManifestName {
		return m, errors.New("the tar ends without its manifest: the backup was cut short")
	}
	return m, nil
}

func runRestore(file, dir string, stdout io.Writer) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	compile := func(doc []byte) (*policy.Compiled, error) { return compiler.CompileRecorded(doc) }
	m, err := backup.Restore(f, dir, compile)
	if err != nil {
		return err
	}
	var recs uint64
	for _, e := range m.Agents {
		recs += e.Records
	}
	fmt.Fprintf(stdout, "restored %d agents (%d records, every log verified) into %s, as of %s\n",
		len(m.Agents), recs, dir, m.Created.Format(time.RFC3339))
	return nil
}

// serveBackup is serve's GET /v1/backup: of the file store in dir; nil for
// another store (PostgreSQL: pg_dump).
func serveBackup(st store.Store, dir string) func(ctx context.Context, w io.Writer) error {
	fs, ok := st.(*file.Store)
	if !ok {
		return nil
	}
	return func(ctx context.Context, w io.Writer) error {
		_, err := backup.Write(ctx, w, backup.Source{Store: fs, Marks: fs, Dir: dir})
		return err
	}
}
