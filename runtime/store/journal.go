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
// replays whatever a crash left in it into the logs, then empties it.
func (s *File) openJournal() (*os.File, error) {
	path := filepath.Join(s.dir, JournalName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("store: journal: %w", err)
	}
	entries, err := readJournal(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("store: journal %s: %w", path, err)
	}
	if len(entries) > 0 {
		if err := s.replayJournal(entries); err != nil {
			f.Close()
			return nil, err
		}
	}
	if err := emptyJournal(f, s.dirF); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// replayJournal puts back the records of entries that a log lacks, then
// makes the logs durable. Records a log has are left as they are (the replay
// may run twice, if a crash interrupts it); a log that lacks records before
// an entry's first is damaged.
func (s *File) replayJournal(entries []journalEntry) error {
	type logEnd struct {
		f     *os.File
		size  int64
		count uint64
	}
	ends := map[string]*logEnd{}
	defer func() {
		for _, e := range ends {
			e.f.Close()
		}
	}()
	for _, e := range entries {
		end, ok := ends[e.agent]
		if !ok {
			path := s.Path(e.agent)
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				return fmt.Errorf("store: journal: %s: %w", e.agent, err)
			}
			res, err := scanLines(e.agent, path, f, -1, nil)
			if err != nil {
				f.Close()
				return fmt.Errorf("store: journal: %w", err)
			}
			end = &logEnd{f: f, size: res.good, count: res.count}
			ends[e.agent] = end
			if res.end > res.good { // a torn write: the journal has that record whole
				if err := f.Truncate(res.good); err != nil {
					return fmt.Errorf("store: journal: %s: %w", e.agent, err)
				}
			}
		}
		if e.firstSeq > end.count {
			return &DamageError{Agent: e.agent, Path: s.Path(e.agent), Seq: end.count, Offset: end.size,
				Reason: fmt.Sprintf("the log ends before record %d, which the journal continues", e.firstSeq)}
		}
		for i, line := range e.lines {
			if seq := e.firstSeq + uint64(i); seq < end.count {
				continue
			}
			b := append(append([]byte(nil), line...), '\n')
			if _, err := end.f.WriteAt(b, end.size); err != nil {
				return fmt.Errorf("store: journal: %s: replay of record %d: %w", e.agent, end.count, err)
			}
			end.size += int64(len(b))
			end.count++
		}
	}
	for agent, e := range ends {
		if err := e.f.Sync(); err != nil {
			return fmt.Errorf("store: journal: %s: %w", agent, err)
		}
	}
	return nil
}

// emptyJournal truncates the journal and makes that durable.
func emptyJournal(f, dir *os.File) error {
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("store: journal: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("store: journal: %w", err)
	}
	return syncDir(dir)
}

// readOnlyJournal returns, for a read-only store, the records its journal
// holds by agent, so that Scan shows what a writer acknowledged even if the
// machine crashed before the logs were synced. Nil if there is no journal.
func readOnlyJournal(dir string) (map[string][]journalEntry, error) {
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
	out := map[string][]journalEntry{}
	for _, e := range entries {
		out[e.agent] = append(out[e.agent], e)
	}
	return out, nil
}
