// Package backup writes a consistent copy of a store as a tar file while the
// store is in use, and makes a data directory of such a copy (docs/operations.md,
// "Backups"). serve's GET /v1/backup and `lineagec backup` write it, `lineagec
// restore` reads it.
//
// The tar holds, in this order: the checkpoint marks (.checkpoints/<agent>.json),
// the notes of lost records (.lost/<agent>.json), each agent's log
// (<agent>.jsonl, its records as the store's Scan passed them) and, last, the
// manifest (lineage-backup.json), which names every log with its record count
// and head: a tar cut short has no manifest and is refused by Restore.
//
// Consistency: the agents are listed when the backup begins and each log is
// read with Scan, which sees every record acknowledged before it began, and
// whole records only, in order: each log in the copy is a prefix of the live
// log cut at a record boundary, holding every record acknowledged before the
// backup began. The marks are read before the logs, and a mark is only
// raised over records already durable, so no mark in the copy names records
// its log lacks. The journal (.journal) is not copied: its records are in the
// logs Scan reads. The lock, the server key and the auth file are not data
// and are not copied (D341 (a backup holds no secret)).
package backup

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lineage-guard/lineage/runtime/store"
	"github.com/lineage-guard/lineage/runtime/store/file"
)

// ManifestName is the tar entry, last in the file, that lists the logs.
const ManifestName = "lineage-backup.json"

// Format names the version of the tar's layout in the manifest.
const Format = "lineage-backup/1"

// Manifest is what a backup holds.
type Manifest struct {
	Format  string    `json:"format"`
	Created time.Time `json:"created"`
	Agents  []Entry   `json:"agents"`
}

// Entry is one agent's log in a backup.
type Entry struct {
	Agent   string `json:"agent"`
	Records uint64 `json:"records"`
	Head    string `json:"head"`
	// Damage, if set, says why the store stopped reading the log: the copy
	// holds the records before it (and the store's note, if it wrote one).
	Damage string `json:"damage,omitempty"`
}

// Source is what a backup reads: a store, its marks (nil: none) and, for a
// file store, its directory, whose .lost notes are copied ("": none).
type Source struct {
	Store store.Store
	Marks store.Marks
	Dir   string
}

// spoolMax is how much of one log a backup keeps in memory before it
// spools the rest to a temporary file (a tar entry's size comes first).
const spoolMax = 16 << 20

// Write writes a backup of src to w and returns its manifest. An error
// leaves w without a manifest: the caller must not keep what it wrote.
func Write(ctx context.Context, w io.Writer, src Source) (Manifest, error) {
	m := Manifest{Format: Format, Created: time.Now().UTC(), Agents: []Entry{}}
	agents, err := src.Store.Agents()
	if err != nil {
		return m, fmt.Errorf("backup: listing the agents: %w", err)
	}
	tw := tar.NewWriter(w)
	mtime := m.Created.Truncate(time.Second)
	put := func(name string, size int64, r io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := io.Copy(tw, r)
		return err
	}
	// Marks first: a mark read before its log never names records the copy lacks.
	if src.Marks != nil {
		for _, a := range agents {
			mk, err := src.Marks.LoadMark(a)
			if err != nil {
				return m, fmt.Errorf("backup: %w", err)
			}
			if mk.Size == 0 {
				continue
			}
			b, _ := json.Marshal(mk)
			b = append(b, '\n')
			if err := put(file.MarksDir+"/"+a+".json", int64(len(b)), bytes.NewReader(b)); err != nil {
				return m, fmt.Errorf("backup: %w", err)
			}
		}
	}
	if src.Dir != "" {
		notes, err := os.ReadDir(filepath.Join(src.Dir, file.LostDir))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return m, fmt.Errorf("backup: %w", err)
		}
		for _, n := range notes {
			a, ok := strings.CutSuffix(n.Name(), ".json")
			if !ok || !n.Type().IsRegular() || store.CheckAgent(a) != nil {
				continue
			}
			b, err := os.ReadFile(filepath.Join(src.Dir, file.LostDir, n.Name()))
			if err != nil {
				return m, fmt.Errorf("backup: %w", err)
			}
			if err := put(file.LostDir+"/"+n.Name(), int64(len(b)), bytes.NewReader(b)); err != nil {
				return m, fmt.Errorf("backup: %w", err)
			}
		}
	}
	for _, a := range agents {
		if err := ctx.Err(); err != nil {
			return m, fmt.Errorf("backup: %w", err)
		}
		e, sp, err := readLog(src.Store, a)
		if err != nil {
			return m, fmt.Errorf("backup: %w", err)
		}
		if e.Records == 0 {
			sp.close()
			continue
		}
		err = put(a+file.Ext, sp.size, sp.reader())
		sp.close()
		if err != nil {
			return m, fmt.Errorf("backup: %w", err)
		}
		m.Agents = append(m.Agents, e)
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	b = append(b, '\n')
	if err := put(ManifestName, int64(len(b)), bytes.NewReader(b)); err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	if err := tw.Close(); err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	return m, nil
}

// spool holds one log's bytes: in memory up to spoolMax, then in a file.
type spool struct {
	buf  bytes.Buffer
	f    *os.File
	size int64
}

func (s *spool) write(b []byte) error {
	s.size += int64(len(b))
	if s.f == nil && s.buf.Len()+len(b) <= spoolMax {
		s.buf.Write(b)
		return nil
	}
	if s.f == nil {
		f, err := os.CreateTemp("", "lineage-backup-*")
		if err != nil {
			return err
		}
		os.Remove(f.Name()) // gone with its last handle
		s.f = f
		if _, err := f.Write(s.buf.Bytes()); err != nil {
			return err
		}
		s.buf = bytes.Buffer{}
	}
	_, err := s.f.Write(b)
	return err
}

func (s *spool) reader() io.Reader {
	if s.f == nil {
		return &s.buf
	}
	return io.NewSectionReader(s.f, 0, s.size)
}

func (s *spool) close() {
	if s.f != nil {
		s.f.Close()
	}
}

// readLog copies agent's log as Scan passes it: whole records, in order,
// each with its newline.
func readLog(st store.Store, agent string) (Entry, *spool, error) {
	e := Entry{Agent: agent}
	sp := &spool{}
	err := st.Scan(agent, func(seq uint64, rec []byte) error {
		if seq != e.Records {
			return fmt.Errorf("%s: the store passed record %d, expected %d", agent, seq, e.Records)
		}
		var h struct {
			Hash string `json:"hash"`
		}
		if err := json.Unmarshal(rec, &h); err != nil {
			return fmt.Errorf("%s: record %d: %w", agent, seq, err)
		}
		if err := sp.write(rec); err != nil {
			return err
		}
		if err := sp.write([]byte{'\n'}); err != nil {
			return err
		}
		e.Records, e.Head = seq+1, h.Hash
		return nil
	})
	var damage *store.DamageError
	switch {
	case errors.Is(err, store.ErrNotFound):
		err = nil // removed since the listing: not in the copy
	case errors.As(err, &damage):
		e.Damage, err = damage.Error(), nil
	}
	if err != nil {
		sp.close()
		return e, nil, err
	}
	return e, sp, nil
}
