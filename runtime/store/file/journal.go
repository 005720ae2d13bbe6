package file

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/lineage-guard/lineage/runtime/store"
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
// A torn write leaves a short or failing entry at the end (a batch is
// written, then synced, then acknowledged, and a failed batch is cut off
// before the next). Damage elsewhere (a flipped byte, a zeroed block) costs
// the entries it hits: reading resumes at the next whole entry, and opening
// the store keeps every record the logs hold intact (see planReplay).
//
// The journal is written in place: the file is kept up to JournalSlack bytes
// longer than its entries, the rest zero and allocated (fallocate), so that
// a batch's write changes no file size. On ext4 an fdatasync after a write
// that grows a file must commit the new size to the file system's own
// journal; one after a write into allocated space need not, and cost here
// about a third less time and CPU (D421: the journal is written in place).
// The entries therefore end at the zero tail, not at the file's end: every
// entry ends in a newline, so the last nonzero byte ends the last entry, and
// a reader drops the zeros after it before it reads.

// JournalName is the journal's file name in the store's directory (a
// leading dot: no agent id can take it).
const JournalName = ".journal"

// DefaultCheckpointBytes is how much journal a Store lets accumulate
// before it syncs the logs and empties it.
const DefaultCheckpointBytes = 64 << 20

// JournalSlack is how far past its entries the journal's file is allocated
// (zero) at most: what a batch that finds too little room allocates past
// itself, and so what a reader may read beyond the entries.
const JournalSlack = 1 << 20

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

// readJournal decodes the journal's entries. An entry that is short or fails
// its checksum is skipped: reading goes on at the next offset where a whole
// entry starts (its length, agent, newline and checksum all hold), so that
// damage in the middle of the journal costs the entries it hit and no others.
// damaged says whether such a region was found with entries after it (a bad
// region at the end is a torn write that was never acknowledged, or damage
// that cannot be told from one). used is where the zero tail starts: the
// bytes entries were written to, damaged or not.
func readJournal(r io.Reader) (entries []journalEntry, damaged bool, used int, err error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, false, 0, err
	}
	data = bytes.TrimRight(data, "\x00")
	for off := 0; off+entryHeader <= len(data); {
		if e, n, ok := parseEntry(data[off:]); ok {
			entries = append(entries, e)
			off += n
			continue
		}
		next := -1
		for p := off + 1; p+entryHeader <= len(data); p++ {
			if _, _, ok := parseEntry(data[p:]); ok {
				next = p
				break
			}
		}
		if next < 0 {
			break
		}
		damaged, off = true, next
	}
	return entries, damaged, len(data), nil
}

// writeZeros writes n zero bytes to f at off.
func writeZeros(f *os.File, off, n int64) error {
	zeros := make([]byte, min(n, 1<<20))
	for n > 0 {
		k := min(n, int64(len(zeros)))
		if _, err := f.WriteAt(zeros[:k], off); err != nil {
			return err
		}
		off, n = off+k, n-k
	}
	return nil
}

// minPayload is the smallest entry payload: a one-byte agent id, a first seq
// and a one-byte record with its newline.
const minPayload = 2 + 1 + 8 + 2

// parseEntry decodes the entry at the start of data and its size, if a whole,
// intact one starts there. The cheap checks come first: the resync of
// readJournal calls it at every offset of a damaged region.
func parseEntry(data []byte) (journalEntry, int, bool) {
	if len(data) < entryHeader {
		return journalEntry{}, 0, false
	}
	n := binary.LittleEndian.Uint32(data)
	if n < minPayload || uint64(n) > uint64(len(data)-entryHeader) {
		return journalEntry{}, 0, false
	}
	payload := data[entryHeader : entryHeader+int(n)]
	al := int(binary.LittleEndian.Uint16(payload))
	if al < 1 || al > store.MaxAgentID || len(payload) < 2+al+8+2 || payload[len(payload)-1] != '\n' ||
		store.CheckAgent(string(payload[2:2+al])) != nil {
		return journalEntry{}, 0, false
	}
	if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(data[4:]) {
		return journalEntry{}, 0, false
	}
	e := journalEntry{agent: string(payload[2 : 2+al]), firstSeq: binary.LittleEndian.Uint64(payload[2+al:])}
	body := payload[2+al+8:]
	e.lines = bytes.Split(body[:len(body)-1], []byte{'\n'})
	for _, l := range e.lines {
		if len(l) == 0 {
			return journalEntry{}, 0, false
		}
	}
	return e, entryHeader + int(n), true
}

// openJournal opens (creating if needed) the journal of a writable store and
// replays whatever a crash left in it into the logs (see replayLog). What it
// cannot replay (a log that is missing, damaged before the journal's records,
// or lacking records the journal lost too) stays in the journal, at its start:
// it returns the size of that part, which checkpoints keep, and the damage by
// agent, which the store reports for those agents.
func (s *Store) openJournal() (f *os.File, kept int64, damaged map[string]error, err error) {
	path := filepath.Join(s.dir, JournalName)
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("store: journal: %w", err)
	}
	entries, hurt, used, err := readJournal(f)
	if err != nil {
		f.Close()
		return nil, 0, nil, fmt.Errorf("store: journal %s: %w", path, err)
	}
	var keep []byte
	damaged = map[string]error{}
	for _, agent := range journalAgents(entries) {
		mine := entriesOf(entries, agent)
		if err := s.replayLog(agent, journalLogOf(agent, s.Path(agent), mine)); err != nil {
			var damage *store.DamageError
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
	if hurt || (used > 0 && len(entries) == 0) {
		// Entries lost to damage may have been the only durable copy of
		// records that the logs hold in the page cache: make every log
		// durable before the journal is emptied.
		if err := syncLogs(s.dirF); err != nil {
			f.Close()
			return nil, 0, nil, fmt.Errorf("store: journal: syncing the logs: %w", err)
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

// syncLogs makes every log in the directory durable: one syncfs where it is
// trusted, else an fsync of each log.
func syncLogs(d *os.File) error {
	if syncfsTrusted(d) && syncfs(d) == nil {
		return nil
	}
	logs, err := listLogs(d.Name())
	if err != nil {
		return err
	}
	for _, lf := range logs.logs {
		if !lf.ent.Type().IsRegular() {
			continue
		}
		f, err := os.OpenFile(lf.path, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
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

// journalSeg is a run of consecutive records the journal holds for one log.
type journalSeg struct {
	first uint64
	recs  [][]byte
}

// journalLog is what the journal holds of one log: runs of records, in seq
// order, with gaps where damage took entries (or why they cannot be used).
type journalLog struct {
	segs []journalSeg
	err  error
}

// journalLogOf gathers agent's entries (in journal order) into runs. An entry
// that goes back to a seq the journal already holds is damage.
func journalLogOf(agent, path string, entries []journalEntry) journalLog {
	var jl journalLog
	for _, e := range entries {
		if n := len(jl.segs); n > 0 {
			last := &jl.segs[n-1]
			end := last.first + uint64(len(last.recs))
			if e.firstSeq == end {
				last.recs = append(last.recs, e.lines...)
				continue
			}
			if e.firstSeq < end {
				jl.err = &store.DamageError{Agent: agent, Path: path, Seq: e.firstSeq,
					Reason: fmt.Sprintf("the journal holds record %d twice", e.firstSeq)}
				return jl
			}
		}
		jl.segs = append(jl.segs, journalSeg{first: e.firstSeq, recs: slices.Clip(e.lines)})
	}
	return jl
}

func (jl journalLog) first() uint64 { return jl.segs[0].first }

// end is one past the last seq the journal holds.
func (jl journalLog) end() uint64 {
	last := jl.segs[len(jl.segs)-1]
	return last.first + uint64(len(last.recs))
}

// record returns record seq if the journal holds it.
func (jl journalLog) record(seq uint64) ([]byte, bool) {
	i := sort.Search(len(jl.segs), func(i int) bool {
		return jl.segs[i].first+uint64(len(jl.segs[i].recs)) > seq
	})
	if i == len(jl.segs) || seq < jl.segs[i].first {
		return nil, false
	}
	return jl.segs[i].recs[seq-jl.segs[i].first], true
}

// next returns the first seq >= seq that the journal holds (jl.end() if none).
func (jl journalLog) next(seq uint64) uint64 {
	for _, sg := range jl.segs {
		if sg.first+uint64(len(sg.recs)) > seq {
			return max(seq, sg.first)
		}
	}
	return jl.end()
}

// errFound stops a scan at the record sought.
var errFound = errors.New("found")

// replayPlan is how a log and the journal's records for it make the log that
// opening the store shows: the log's records before keep as they are, then
// the journal's records write, then, if lost is set, damage.
type replayPlan struct {
	keep  uint64   // records of the log kept as they are
	cut   int64    // byte offset just past them
	nl    bool     // the last kept record lacks its newline
	write [][]byte // the journal's records keep, keep+1, ...
	trunc bool     // the file's bytes after cut go (also when write is empty)
	lost  error    // a *DamageError: records lost from every copy
}

// planReplay merges a log with what the journal holds of it. The records
// before the journal's first were durable when the journal took them (a
// checkpoint or the log's creation synced them): the log must hold them. From
// there on the journal's records are the truth (it is checksummed; the log's
// unsynced tail may have been lost in any order by a machine crash: a torn
// record, a hole, a stale page), so the log is kept for as long as it agrees
// with them; where the journal lacks a record (damage took its entry, or the
// log goes on past it) the log's own line stands in if it is a whole record
// (valid JSON: a hole or a torn write is not). A damaged journal thus never
// removes a record that is intact in the log (D40: a damaged journal never removes an intact record). From the first record the
// log lacks or holds differently, the journal's run of records is written;
// records lost from both are damage naming the first missing seq.
func planReplay(agent, path string, r io.ReaderAt, size int64, jl journalLog) (replayPlan, error) {
	var p replayPlan
	first := jl.first()
	var off int64
	res, err := scanLines(agent, path, r, -1, func(n uint64, line []byte) error {
		if n >= first {
			if rec, ok := jl.record(n); ok {
				if !bytes.Equal(rec, line) {
					return errFound
				}
			} else if !json.Valid(line) {
				return errFound
			}
		}
		off += int64(len(line)) + 1
		p.keep = n + 1
		return nil
	})
	var stop errStop
	var damage *store.DamageError
	diverged := true
	switch {
	case errors.As(err, &stop) && stop.err == errFound:
		p.cut = off
	case errors.As(err, &damage) && damage.Seq >= first:
		// Damage from the journal's first record on (a lost tail, a stale
		// newline): the log is cut there.
		p.cut = damage.Offset
	case err != nil:
		return p, err
	default:
		diverged = false
		p.cut, p.nl = res.good, res.unterminated
	}
	if p.keep < first {
		return p, &store.DamageError{Agent: agent, Path: path, Seq: p.keep, Offset: p.cut,
			Reason: fmt.Sprintf("the log ends before record %d, which the journal continues", first)}
	}
	for seq := p.keep; ; seq++ {
		rec, ok := jl.record(seq)
		if !ok {
			break
		}
		p.write = append(p.write, rec)
	}
	end := p.keep + uint64(len(p.write))
	if end < jl.end() {
		next := jl.next(end)
		p.lost = &store.DamageError{Agent: agent, Path: path, Seq: end, Offset: p.cut + int64(len(joinLines(p.write))),
			Reason: fmt.Sprintf("records %d to %d are lost: the journal was damaged where it held them and the log lacks them (the journal keeps records %d on)", end, next-1, next)}
	}
	p.trunc = size > p.cut && (len(p.write) > 0 || diverged && p.lost == nil)
	return p, nil
}

// replayLog makes agent's log what planReplay says, and durable. Running it
// twice (a crash during replay) gives the same log. Records lost from every
// copy are returned as a *DamageError, after the log is repaired up to them.
func (s *Store) replayLog(agent string, jl journalLog) error {
	if jl.err != nil {
		return jl.err
	}
	path := s.Path(agent)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return &store.DamageError{Agent: agent, Path: path, Seq: 0, Reason: "the log is missing, and the journal holds its records from " + fmt.Sprint(jl.first())}
	}
	if err != nil {
		return fmt.Errorf("store: journal: %s: %w", agent, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("store: journal: %s: %w", agent, err)
	}
	p, err := planReplay(agent, path, f, st.Size(), jl)
	if err != nil {
		return err
	}
	if p.trunc || len(p.write) > 0 {
		if err := f.Truncate(p.cut); err != nil {
			return fmt.Errorf("store: journal: %s: %w", agent, err)
		}
	}
	if len(p.write) > 0 {
		var b []byte
		if p.nl {
			b = append(b, '\n')
		}
		b = append(b, joinLines(p.write)...)
		if _, err := f.WriteAt(b, p.cut); err != nil {
			return fmt.Errorf("store: journal: %s: replay from record %d: %w", agent, p.keep, err)
		}
	}
	// Synced even if unchanged: the journal that backs its tail is emptied next.
	if err := f.Sync(); err != nil {
		return fmt.Errorf("store: journal: %s: %w", agent, err)
	}
	return p.lost
}

// readOnlyJournal returns, for a read-only store, the records its journal
// holds by agent, so that Scan shows what a writer acknowledged even if the
// machine crashed before the logs were synced. Nil if there is no journal.
func (s *Store) readOnlyJournal() (map[string]journalLog, error) {
	f, err := os.Open(filepath.Join(s.dir, JournalName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: journal: %w", err)
	}
	defer f.Close()
	entries, _, _, err := readJournal(f)
	if err != nil || len(entries) == 0 {
		return nil, err
	}
	out := map[string]journalLog{}
	for _, agent := range journalAgents(entries) {
		out[agent] = journalLogOf(agent, s.Path(agent), entriesOf(entries, agent))
	}
	return out, nil
}
