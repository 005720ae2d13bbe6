package file

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/lineage-guard/lineage/runtime/store"
)

// scanBufSize is the initial read buffer of a scan; it grows (up to
// MaxRecord+1) only for a line that does not fit.
const scanBufSize = 256 << 10

var scanBufs = sync.Pool{New: func() any { b := make([]byte, scanBufSize); return &b }}

// scanResult describes what a scan of a log file read.
type scanResult struct {
	good  int64  // offset just past the last complete line
	count uint64 // complete lines before good
	end   int64  // bytes read: good plus a torn tail, if any
	// unterminated: the last record counted lacks its newline (a complete
	// JSON value without '\n' after it), so good == end.
	unterminated bool
}

// errStop is how scanLines reports an error returned by fn, so that the caller
// can tell it from damage or I/O errors and return it unchanged.
type errStop struct{ err error }

func (e errStop) Error() string { return e.err.Error() }

// scanLines reads r from offset 0 up to limit (limit < 0: to end of file) and
// calls fn (if not nil) with each complete line, newline stripped. A final
// segment without a newline is a torn tail (counted in end, not passed to fn)
// unless it is a complete JSON value: a record is one JSON object, and no
// proper prefix of one is valid JSON, so such a segment is a whole record that
// lacks only its newline. It is passed to fn and counted (unterminated), and
// the next append writes the newline first (D40: a damaged journal never removes an intact record).
// It fails with a *DamageError on an empty line or a line over MaxRecord, with
// errStop when fn fails, and with the read error otherwise.
func scanLines(agent, path string, r io.ReaderAt, limit int64, fn func(uint64, []byte) error) (scanResult, error) {
	var res scanResult
	bp := scanBufs.Get().(*[]byte)
	buf := *bp
	defer func() {
		if cap(buf) == scanBufSize {
			*bp = buf[:scanBufSize]
			scanBufs.Put(bp)
		}
	}()

	var (
		base     int64 // file offset of buf[0]
		start    int   // first unconsumed byte of buf
		end      int   // end of valid data in buf
		searched int   // bytes after start known to hold no newline
		eof      bool
	)
	damage := func(reason string) error {
		return &store.DamageError{Agent: agent, Path: path, Seq: res.count, Offset: base + int64(start), Reason: reason}
	}
	for {
		if i := bytes.IndexByte(buf[start+searched:end], '\n'); i >= 0 {
			e := start + searched + i
			if e == start {
				return res, damage("empty line")
			}
			if fn != nil {
				if err := fn(res.count, buf[start:e:e]); err != nil {
					return res, errStop{err}
				}
			}
			res.count++
			start, searched = e+1, 0
			res.good = base + int64(start)
			continue
		}
		searched = end - start
		if eof {
			break
		}
		if end == len(buf) {
			if start > 0 { // slide the unfinished line to the front
				end = copy(buf, buf[start:end])
				base += int64(start)
				start = 0
			} else { // one line fills the buffer
				if len(buf) > store.MaxRecord {
					return res, damage(fmt.Sprintf("line longer than the limit of %d bytes", store.MaxRecord))
				}
				nb := make([]byte, min(2*len(buf), store.MaxRecord+1))
				end = copy(nb, buf[:end])
				buf = nb
			}
		}
		want := len(buf) - end
		if limit >= 0 {
			if rem := limit - base - int64(end); rem < int64(want) {
				want = int(rem)
			}
			if want == 0 {
				eof = true
				continue
			}
		}
		n, err := r.ReadAt(buf[end:end+want], base+int64(end))
		end += n
		switch {
		case errors.Is(err, io.EOF):
			eof = true
		case err != nil:
			return res, fmt.Errorf("store: %s: reading record %d: %w", agent, res.count, err)
		}
	}
	res.end = base + int64(end)
	if end > start && json.Valid(buf[start:end]) {
		if fn != nil {
			if err := fn(res.count, buf[start:end:end]); err != nil {
				return res, errStop{err}
			}
		}
		res.count++
		res.good, res.unterminated = res.end, true
	}
	return res, nil
}

// ScanFile reads a log file outside any store (a copy of <agent>.jsonl) by the
// rules Scan of a Store reads a log by, so that a tool checking a file
// sees the records the store would: fn gets each record in order; a final
// segment that is not a whole record is a torn tail, not passed on, and its
// length is returned; an empty or over-long line is a *DamageError.
func ScanFile(path string, fn func(seq uint64, rec []byte) error) (torn int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	name := strings.TrimSuffix(filepath.Base(path), Ext)
	res, err := scanLines(name, path, f, -1, fn)
	var stop errStop
	if errors.As(err, &stop) {
		return 0, stop.err
	}
	return res.end - res.good, err
}
