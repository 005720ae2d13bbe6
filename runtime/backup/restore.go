package backup

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lineage-guard/lineage/policy"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store"
	"github.com/lineage-guard/lineage/runtime/store/file"
)

// shardAfter is the file store's default Options.ShardAfter (tests set less).
var shardAfter = file.DefaultShardAfter

// ErrNotEmpty is returned by Restore for a data directory that holds files.
var ErrNotEmpty = errors.New("the data directory is not empty")

// Restore makes the data directory dir from the backup read from r: dir must
// not exist or be empty (ErrNotEmpty). The files are written in a new
// directory beside dir, every log is verified (the chain, the canonical form,
// the fold's checks and, with compile, the policy's digest) and checked
// against the manifest, and only then is the directory renamed to dir: on
// any error dir is left as it was (D342 (restore makes a new directory
// whole or not at all)).
func Restore(r io.Reader, dir string, compile func(doc []byte) (*policy.Compiled, error)) (Manifest, error) {
	var m Manifest
	if names, err := os.ReadDir(dir); err == nil && len(names) > 0 {
		return m, fmt.Errorf("restore: %s: %w (restore makes a new data directory; give an empty or new one)", dir, ErrNotEmpty)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return m, fmt.Errorf("restore: %w", err)
	}
	parent := filepath.Dir(filepath.Clean(dir))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return m, fmt.Errorf("restore: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".restore-*")
	if err != nil {
		return m, fmt.Errorf("restore: %w", err)
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return m, fmt.Errorf("restore: %w", err)
	}
	m, logs, err := extract(r, tmp)
	if err != nil {
		return m, fmt.Errorf("restore: %w", err)
	}
	named := map[string]bool{}
	for _, e := range m.Agents {
		path, ok := logs[e.Agent]
		if !ok || named[e.Agent] {
			return m, fmt.Errorf("restore: the manifest names agent %s, whose log is not in the backup", e.Agent)
		}
		named[e.Agent] = true
		if err := verifyLog(path, e, compile); err != nil {
			return m, fmt.Errorf("restore: %w", err)
		}
	}
	dirs := map[string]bool{tmp: true, filepath.Join(tmp, file.MarksDir): true, filepath.Join(tmp, file.LostDir): true}
	for a, path := range logs {
		if !named[a] {
			return m, fmt.Errorf("restore: the log of %s is in the backup but not in its manifest", a)
		}
		dirs[filepath.Dir(path)] = true
	}
	// The shard directories first, then the directory that names them.
	for _, d := range slices.Backward(slices.Sorted(maps.Keys(dirs))) {
		if err := syncPath(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			return m, fmt.Errorf("restore: %w", err)
		}
	}
	// rename(2) replaces an empty directory; a file made in dir since the
	// check above makes it fail, and nothing is lost.
	if err := os.Rename(tmp, dir); err != nil {
		return m, fmt.Errorf("restore: %w", err)
	}
	done = true
	if err := syncPath(parent); err != nil {
		return m, fmt.Errorf("restore: %w", err)
	}
	return m, nil
}

// extract writes the tar's entries in dir and returns its manifest and the
// file of each agent's log it held, each where a file store puts a new log
// (in dir, then in shard directories once dir holds many: D390 (new logs go
// to hash-named shard directories once the directory holds 4,096 logs)). It
// refuses any entry but those Write makes.
func extract(r io.Reader, dir string) (Manifest, map[string]string, error) {
	var m Manifest
	logs := map[string]string{}
	flat := 0
	tr := tar.NewReader(r)
	seenManifest := false
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return m, nil, fmt.Errorf("reading the backup: %w (a backup cut short has no manifest)", err)
		}
		if seenManifest {
			return m, nil, fmt.Errorf("entry %q follows the manifest: not a backup of lineagec", h.Name)
		}
		if h.Typeflag != tar.TypeReg {
			return m, nil, fmt.Errorf("entry %q is not a regular file: not a backup of lineagec", h.Name)
		}
		if h.Name == ManifestName {
			if err := json.NewDecoder(io.LimitReader(tr, 64<<20)).Decode(&m); err != nil {
				return m, nil, fmt.Errorf("the manifest: %w", err)
			}
			if m.Format != Format {
				return m, nil, fmt.Errorf("the manifest's format is %q, this lineagec reads %q", m.Format, Format)
			}
			seenManifest = true
			continue
		}
		sub, name := "", h.Name
		if d, n, ok := strings.Cut(h.Name, "/"); ok {
			sub, name = d, n
		}
		ext := ".json"
		switch sub {
		case "":
			ext = file.Ext
		case file.MarksDir, file.LostDir:
		default:
			return m, nil, fmt.Errorf("entry %q is not one a backup holds", h.Name)
		}
		agent, ok := strings.CutSuffix(name, ext)
		if !ok || store.CheckAgent(agent) != nil {
			return m, nil, fmt.Errorf("entry %q is not one a backup holds", h.Name)
		}
		path := filepath.Join(dir, sub, name)
		if sub == "" {
			if _, ok := logs[agent]; ok {
				return m, nil, fmt.Errorf("entry %q appears twice", h.Name)
			}
			path = file.NewLogPath(dir, agent, flat, shardAfter)
			if filepath.Dir(path) == dir {
				flat++
			}
			logs[agent] = path
		}
		if d := filepath.Dir(path); d != dir {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return m, nil, err
			}
		}
		if err := writeFile(path, tr); err != nil {
			return m, nil, err
		}
	}
	if !seenManifest {
		return m, nil, errors.New("the backup has no manifest (lineage-backup.json): it was cut short, or is not a backup of lineagec")
	}
	return m, logs, nil
}

// writeFile writes r to a new file at path and syncs it.
func writeFile(path string, r io.Reader) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// syncPath syncs a directory.
func syncPath(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// verifyLog checks the log at path as opening it would, and that it holds
// the records and head the manifest names.
func verifyLog(path string, e Entry, compile func(doc []byte) (*policy.Compiled, error)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	recs, err := runtime.VerifyLog(func(fn func(seq uint64, line []byte) error) error {
		br := bufio.NewReaderSize(f, 64<<10)
		var seq uint64
		for {
			line, err := br.ReadSlice('\n')
			if errors.Is(err, bufio.ErrBufferFull) {
				big := append([]byte(nil), line...)
				for errors.Is(err, bufio.ErrBufferFull) && len(big) <= store.MaxRecord+1 {
					line, err = br.ReadSlice('\n')
					big = append(big, line...)
				}
				line = big
			}
			if errors.Is(err, io.EOF) && len(line) == 0 {
				return nil
			}
			if err != nil {
				return fmt.Errorf("record %d: the line does not end (%v)", seq, err)
			}
			line = bytes.TrimSuffix(line, []byte{'\n'})
			if err := fn(seq, line); err != nil {
				return err
			}
			seq++
		}
	}, compile)
	if err != nil {
		return fmt.Errorf("the log of %s does not verify: %w", e.Agent, err)
	}
	if uint64(len(recs)) != e.Records || len(recs) == 0 {
		return fmt.Errorf("the log of %s holds %d records, the manifest says %d", e.Agent, len(recs), e.Records)
	}
	if head := recs[len(recs)-1].Hash; head != e.Head {
		return fmt.Errorf("the log of %s ends with %s, the manifest says %s", e.Agent, head, e.Head)
	}
	return nil
}
