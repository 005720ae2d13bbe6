package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// The journal (SyncJournal) makes appends durable with one fdatasync of one
// file per batch, instead of a sync of every log the batch wrote: an append
// writes its records to the agent's log as always (into the page cache) and,
// through the committer, to the journal, a single file in the store's
// directory. A crash of the process loses nothing (the page cache survives
// it); a crash of the machine may lose the logs' unsynced tails, and opening
// the store puts them back from the journal. Every CheckpointBytes of journal,
// and on Close, the committer syncs the whole file system (syncfs) and empties
// the journal.
//
// An entry is framed for a reader that must find where a torn write ends:
//
//	length   uint32 LE  bytes of payload
//	checksum uint32 LE  CRC-32C of payload
//	payload:  agent length (uint16 LE), agent, first seq (uint64 LE),
//	          then the records, each followed by '\n', as in the log
//
// Reading stops at the first entry that is short or fails its checksum: the
// entries after it were never acknowledged (a batch is written, then synced,
// then acknowledged, and a failed batch is cut off before the next).

// JournalName is the journal's file name in a File store's directory (a
// leading dot: no agent id can take it).
const JournalName = ".journal"

// DefaultCheckpointBytes is how much journal a File store lets accumulate
// before it syncs the logs and empties it.
const DefaultCheckpointBytes = 64 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const entryHeader = 8

// appendEntry appends one journal entry for agent's records firstSeq... given
// as they are written to the log (lines).
func appendEntry(dst []byte, agent string, firstSeq uint64, lines []byte) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, entryHeader)...)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(agent)))
	dst = append(dst, agent...)
	dst = binary.LittleEndian.AppendUint64(dst, firstSeq)
	dst = append(dst, lines...)
	payload := dst[start+entryHeader:]
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(payload, castagnoli))
	return dst
}

// journalEntry is one decoded entry: records firstSeq... of agent's log.
type journalEntry struct {
	agent    string
	firstSeq uint64
	lines    [][]byte // without their newlines
}

// readJournal decodes the journal's entries up to the first that is torn or
// damaged.
func readJournal(r io.Reader) ([]journalEntry, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	var out []journalEntry
	for len(data) >= entryHeader {
		n := binary.LittleEndian.Uint32(data)
		sum := binary.LittleEndian.Uint32(data[4:])
		if uint64(n) > uint64(len(data)-entryHeader) {
			break
		}
		payload := data[entryHeader : entryHeader+int(n)]
		if crc32.Checksum(payload, castagnoli) != sum || len(payload) < 2 {
			break
		}
		al := int(binary.LittleEndian.Uint16(payload))
		if len(payload) < 2+al+8 {
			break
		}
		e := journalEntry{agent: string(payload[2 : 2+al]), firstSeq: binary.LittleEndian.Uint64(payload[2+al:])}
		body := payload[2+al+8:]
		if checkAgent(e.agent) != nil || len(body) == 0 || body[len(body)-1] != '\n' {
			break
		}
		for _, line := range bytes.Split(body[:len(body)-1], []byte{'\n'}) {
			e.lines = append(e.lines, line)
		}
		out = append(out, e)
		data = data[entryHeader+int(n):]
	}
	return out, nil
}

// openJournal opens (creating if needed) the journal of a writable store and
// replays whatever a crash left in it into the logs. What it cannot replay (a
// log that is missing or damaged before the journal's records) stays in the
// journal, at its start: it returns the size of that part, which checkpoints
// keep, and the damage by agent, which the store reports for those agents.
func (s *File) openJournal() (f *os.File, kept int64, damaged map[string]error, err error) {
	path := filepath.Join(s.dir, JournalName)
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("store: journal: %w", err)
	}
	entries, err := readJournal(f)
	if err != nil {
		f.Close()
		return nil, 0, nil, fmt.Errorf("store: journal %s: %w", path, err)
	}
	var keep []byte
	damaged = map[string]error{}
	for _, agent := range journalAgents(entries) {
		mine := entriesOf(entries, agent)
		if err := s.replayLog(agent, mine); err != nil {
			var damage *DamageError
			if !errors.As(err, &damage) {
				f.Close()
				return nil, 0, nil, err
			}
			damaged[agent] = damage
			for _, e := range mine {
				keep = appendEntry(keep, e.agent, e.firstSeq, joinLines(e.lines))
			}
		}
	}
	if len(keep) == 0 {
		err = f.Truncate(0)
		if err == nil {
			err = f.Sync()
		}
	} else {
		// The kept entries are the only copy of their records: they are
		// written to a new file that replaces the journal whole, never left
		// to a truncation a crash could make durable first.
		f.Close()
		f, err = replaceFile(path, keep)
	}
	if err == nil {
		err = syncDir(s.dirF)
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		return nil, 0, nil, fmt.Errorf("store: journal: %w", err)
	}
	return f, int64(len(keep)), damaged, nil
}

// replaceFile makes path hold exactly b, atomically (a synced temporary file
// renamed over it; the caller syncs the directory), and returns it open.
func replaceFile(path string, b []byte) (*os.File, error) {
	tmp := path + ".tmp"
	t, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	if _, err = t.Write(b); err == nil {
		err = t.Sync()
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		t.Close()
		os.Remove(tmp)
		return nil, err
	}
	return t, nil
}

// journalAgents lists the agents of entries in the order they first appear.
func journalAgents(entries []journalEntry) []string {
	seen := map[string]bool{}
	var out []string
	for _, e := range entries {
		if !seen[e.agent] {
			seen[e.agent] = true
			out = append(out, e.agent)
		}
	}
	return out
}

func entriesOf(entries []journalEntry, agent string) []journalEntry {
	var out []journalEntry
	for _, e := range entries {
		if e.agent == agent {
			out = append(out, e)
		}
	}
	return out
}

func joinLines(lines [][]byte) []byte {
	var b []byte
	for _, l := range lines {
		b = append(append(b, l...), '\n')
	}
	return b
}

// journalRecords checks that an agent's entries continue one another and
// returns the seq of their first record and the records.
func journalRecords(agent, path string, entries []journalEntry) (uint64, [][]byte, error) {
	first := entries[0].firstSeq
	var recs [][]byte
	for _, e := range entries {
		if want := first + uint64(len(recs)); e.firstSeq != want {
			return 0, nil, &DamageError{Agent: agent, Path: path, Seq: want,
				Reason: fmt.Sprintf("the journal's records jump from %d to %d", want, e.firstSeq)}
		}
		recs = append(recs, e.lines...)
	}
	return first, recs, nil
}

// errFound stops a scan at the record sought.
var errFound = errors.New("found")

// prefixEnd returns the byte offset at which record seq starts in the log,
// reading the records before it, which a sync made durable: a log that lacks
// any of them, or holds a damaged one, is damaged.
func prefixEnd(agent, path string, r io.ReaderAt, seq uint64) (int64, error) {
	if seq == 0 {
		return 0, nil // the journal holds the whole log
	}
	var off int64
	res, err := scanLines(agent, path, r, -1, func(n uint64, line []byte) error {
		if n == seq {
			return errFound
		}
		off += int64(len(line)) + 1
		return nil
	})
	var stop errStop
	var damage *DamageError
	switch {
	case errors.As(err, &stop) && stop.err == errFound:
		return off, nil
	case errors.As(err, &damage) && damage.Seq == seq:
		// The damage starts at the journal's first record (a lost tail, a
		// stale newline): that is where the log is cut anyway.
		return damage.Offset, nil
	case err != nil:
		return 0, err
	case res.count < seq:
		return 0, &DamageError{Agent: agent, Path: path, Seq: res.count, Offset: res.good,
			Reason: fmt.Sprintf("the log ends before record %d, which the journal continues", seq)}
	}
	return off, nil // the log ends exactly where the journal starts
}

// replayLog rewrites agent's log from the journal's first record for it on.
// The records before that one were durable when the journal took them (a
// checkpoint or the log's Create synced them); the ones after may have been
// lost in any order by a machine crash (a torn record, a hole, a stale page),
// so the log is cut there and the journal's records written again, whatever
// the log holds. Running it twice (a crash during replay) gives the same log.
func (s *File) replayLog(agent string, entries []journalEntry) error {
	path := s.Path(agent)
	first, recs, err := journalRecords(agent, path, entries)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return &DamageError{Agent: agent, Path: path, Seq: 0, Reason: "the log is missing, and the journal holds its records from " + fmt.Sprint(first)}
	}
	if err != nil {
		return fmt.Errorf("store: journal: %s: %w", agent, err)
	}
	defer f.Close()
	off, err := prefixEnd(agent, path, f, first)
	if err != nil {
		return err
	}
	b := joinLines(recs)
	if err := f.Truncate(off); err != nil {
		return fmt.Errorf("store: journal: %s: %w", agent, err)
	}
	if _, err := f.WriteAt(b, off); err != nil {
		return fmt.Errorf("store: journal: %s: replay from record %d: %w", agent, first, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("store: journal: %s: %w", agent, err)
	}
	return nil
}

// journalLog is, for a read-only store, what the journal holds of one log:
// its records from first on (or why they cannot be used).
type journalLog struct {
	first uint64
	recs  [][]byte
	err   error
}

// readOnlyJournal returns, for a read-only store, the records its journal
// holds by agent, so that Scan shows what a writer acknowledged even if the
// machine crashed before the logs were synced. Nil if there is no journal.
func readOnlyJournal(dir string) (map[string]journalLog, error) {
	f, err := os.Open(filepath.Join(dir, JournalName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: journal: %w", err)
	}
	defer f.Close()
	entries, err := readJournal(f)
	if err != nil || len(entries) == 0 {
		return nil, err
	}
	out := map[string]journalLog{}
	for _, agent := range journalAgents(entries) {
		first, recs, err := journalRecords(agent, filepath.Join(dir, agent+Ext), entriesOf(entries, agent))
		out[agent] = journalLog{first: first, recs: recs, err: err}
	}
	return out, nil
}
