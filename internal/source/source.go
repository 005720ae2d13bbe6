// Package source owns reading user documents (policies, conformance case files)
// from JSON or YAML into plain JSON values while keeping every node's
// file:line:col, and validating them against lineage's schemas with diagnostics
// that name the JSON pointer and position.
package source

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/lineage-guard/lineage/internal/diag"
)

// MaxBytes is the largest input Load accepts; a larger one gets a single
// too_large diagnostic and is not parsed.
const MaxBytes = 4 << 20

// MaxDepth is the deepest nesting of objects and arrays Load accepts: the root
// container is at depth 1. A container deeper than this gets a too_deep
// diagnostic and its contents are skipped.
const MaxDepth = 64

// maxNodes caps the values a YAML document may expand to (aliases included).
const maxNodes = 1_000_000

// Document is a loaded JSON or YAML document: a plain JSON value plus the
// position of every node in the file it came from.
type Document struct {
	File  string // as given; "" for non-file input
	Value any    // map[string]any, []any, string, json.Number, bool, nil — like encoding/json with UseNumber

	pos    map[string]span // JSON pointer → position of the value and of its key
	failed bool            // Load reported diagnostics; Value is nil and meaningless

	// deferred are number problems LoadDeferring kept for Validate to report
	// (their values stand as 0 in Value, so nothing reads them).
	deferred diag.List
	opts     LoadOptions // while loading
}

// LoadOptions says, by JSON pointer, how Load treats a number a double does
// not hold as written (D231: numbers a double holds); nil functions: refused.
type LoadOptions struct {
	// Defer: the problem does not fail the load; Validate reports it, on the
	// document or on the Sub that holds it, first among its diagnostics (the
	// value there reads as 0 meanwhile). A case file defers the problems of
	// the policies it holds, so that a case can expect them as compile errors.
	Defer func(pointer string) bool
	// Exact: the number is the document's own, kept as written by its reader
	// (never made a double): it is refused only beyond 2^53 or so near zero
	// a double would lose it. A case file's times and expected numbers are;
	// its args are checked by the runtime, as a request's.
	Exact func(pointer string) bool
}

func (d *Document) exactAt(ptr string) bool {
	return d.opts.Exact != nil && d.opts.Exact(ptr)
}

// span is where a node starts and, for an object member, where its key starts;
// for a string, also where its text starts (after an opening quote; the first
// content line of a YAML block scalar, whose lines all start at column tindent).
type span struct {
	line, col   int
	kline, kcol int
	tline, tcol int
	tindent     int
}

// Load parses data as JSON when it starts (after whitespace and a UTF-8 byte
// order mark) with '{' or '[', else as YAML (one document; a second document is
// an error). On any diagnostic the returned Document's Value is nil. Load never
// panics and never returns a nil Document.
func Load(file string, data []byte) (*Document, diag.List) {
	return LoadWith(file, data, LoadOptions{})
}

// LoadWith is Load with opts for numbers.
func LoadWith(file string, data []byte, opts LoadOptions) (*Document, diag.List) {
	d := &Document{File: file, pos: map[string]span{}, opts: opts}
	diags := d.load(data)
	d.opts = LoadOptions{}
	if opts.Defer != nil && len(diags) > 0 && d.Value != nil {
		var kept, later diag.List
		for _, x := range diags {
			if x.Code == diag.CodeNumber && opts.Defer(x.Pointer) {
				later = append(later, x)
			} else {
				kept = append(kept, x)
			}
		}
		if len(kept) == 0 {
			for _, x := range later {
				d.Value = setAt(d.Value, x.Pointer, json.Number("0"))
			}
			later = dedupe(later)
			later.Sort()
			d.deferred = later
			return d, nil
		}
	}
	if len(diags) > 0 {
		diags = dedupe(diags)
		diags.Sort()
		d.Value, d.pos, d.failed = nil, map[string]span{}, true
	}
	return d, diags
}

func (d *Document) load(data []byte) (diags diag.List) {
	defer func() {
		if r := recover(); r != nil {
			// Defence in depth: a bug in a parser must not take the process down.
			diags = append(diags, diag.Diagnostic{Code: diag.CodeSyntax, Position: diag.Position{File: d.File},
				Message: fmt.Sprintf("cannot parse document (internal error: %v)", r)})
		}
	}()
	if len(data) > MaxBytes {
		return diag.List{{Code: diag.CodeTooLarge, Position: diag.Position{File: d.File},
			Message: fmt.Sprintf("input is %d bytes, over the limit of %d bytes", len(data), MaxBytes)}}
	}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	if off := invalidUTF8(data); off >= 0 {
		line, col := lineCol(data, off)
		return diag.List{{Code: diag.CodeSyntax, Position: diag.Position{File: d.File, Line: line, Col: col},
			Message: fmt.Sprintf("invalid UTF-8 (byte 0x%02x); documents must be UTF-8 text", data[off])}}
	}
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 {
		return diag.List{{Code: diag.CodeSyntax, Position: diag.Position{File: d.File}, Message: "empty document"}}
	}
	if trimmed[0] == '{' || trimmed[0] == '[' {
		return d.loadJSON(data)
	}
	return d.loadYAML(data)
}

func dedupe(l diag.List) diag.List {
	seen := map[diag.Diagnostic]bool{}
	out := l[:0]
	for _, x := range l {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// invalidUTF8 returns the offset of the first byte that is not valid UTF-8, or -1.
func invalidUTF8(b []byte) int {
	if utf8.Valid(b) {
		return -1
	}
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return -1
}

// lineCol returns the 1-based line and column (in characters) of byte offset off.
func lineCol(b []byte, off int) (line, col int) {
	var c cursor
	return c.at(b, off)
}

// cursor computes line:col for increasing offsets in amortized linear time.
type cursor struct{ off, line, col int }

func (c *cursor) at(b []byte, off int) (int, int) {
	if c.line == 0 || off < c.off {
		c.off, c.line, c.col = 0, 1, 1
	}
	if off > len(b) {
		off = len(b)
	}
	for c.off < off {
		if b[c.off] == '\n' {
			c.off++
			c.line++
			c.col = 1
			continue
		}
		_, n := utf8.DecodeRune(b[c.off:])
		c.off += n
		c.col++
	}
	return c.line, c.col
}

func (d *Document) set(ptr string, line, col int) {
	s := d.pos[ptr]
	s.line, s.col = line, col
	d.pos[ptr] = s
}

func (d *Document) setText(ptr string, line, col, indent int) {
	s := d.pos[ptr]
	s.tline, s.tcol, s.tindent = line, col, indent
	d.pos[ptr] = s
}

// TextPos is where the text of the string at pointer starts in the file: after
// the opening quote of a quoted string, at the first content line of a YAML
// block scalar. For a block scalar, blockCol is the column every content line
// starts at (0 otherwise), so a position inside the text (an expression's
// line and column) maps into the file. Falls back to Pos.
func (d *Document) TextPos(pointer string) (pos diag.Position, blockCol int) {
	if d != nil {
		if s, ok := d.pos[pointer]; ok && s.tline > 0 {
			return diag.Position{File: d.File, Line: s.tline, Col: s.tcol}, s.tindent
		}
	}
	return d.Pos(pointer), 0
}

func (d *Document) setKey(ptr string, line, col int) {
	s := d.pos[ptr]
	s.kline, s.kcol = line, col
	d.pos[ptr] = s
}

// Pos returns the position of the value at pointer. For a pointer with no
// recorded position (a missing member, say) it walks up to the nearest
// ancestor that has one; at worst it names the file alone.
func (d *Document) Pos(pointer string) diag.Position {
	if d == nil {
		return diag.Position{}
	}
	for {
		if s, ok := d.pos[pointer]; ok && s.line > 0 {
			return diag.Position{File: d.File, Line: s.line, Col: s.col}
		}
		if pointer == "" {
			return diag.Position{File: d.File}
		}
		pointer = parent(pointer)
	}
}

// KeyPos returns the position of the key of the object member at pointer (the
// place to blame for an unknown field); for anything else it is Pos(pointer).
func (d *Document) KeyPos(pointer string) diag.Position {
	if d == nil {
		return diag.Position{}
	}
	if s, ok := d.pos[pointer]; ok && s.kline > 0 {
		return diag.Position{File: d.File, Line: s.kline, Col: s.kcol}
	}
	return d.Pos(pointer)
}

// Sub returns the subtree at pointer as a Document of its own: its pointers are
// relative to the subtree, its positions still point into the same file. It
// returns nil when there is no value at pointer.
func (d *Document) Sub(pointer string) *Document {
	if d == nil || d.failed {
		return nil
	}
	v, ok := lookup(d.Value, pointer)
	if !ok {
		return nil
	}
	sub := &Document{File: d.File, Value: v, pos: map[string]span{}}
	prefix := pointer + "/"
	for _, x := range d.deferred {
		if x.Pointer == pointer || strings.HasPrefix(x.Pointer, prefix) {
			x.Pointer = x.Pointer[len(pointer):]
			sub.deferred = append(sub.deferred, x)
		}
	}
	for p, s := range d.pos {
		switch {
		case p == pointer:
			s.kline, s.kcol = 0, 0
			sub.pos[""] = s
		case strings.HasPrefix(p, prefix):
			sub.pos[p[len(pointer):]] = s
		}
	}
	return sub
}

// parent drops the last reference token of a non-empty pointer.
func parent(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

// lookup returns the value at a JSON pointer.
func lookup(v any, pointer string) (any, bool) {
	if pointer == "" {
		return v, true
	}
	if pointer[0] != '/' {
		return nil, false
	}
	for _, tok := range strings.Split(pointer[1:], "/") {
		tok = unescapeToken(tok)
		switch x := v.(type) {
		case map[string]any:
			e, ok := x[tok]
			if !ok {
				return nil, false
			}
			v = e
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) || (len(tok) > 1 && tok[0] == '0') {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// setAt returns v with the value at pointer replaced by nv (v itself when
// the pointer names nothing).
func setAt(v any, pointer string, nv any) any {
	if pointer == "" {
		return nv
	}
	i := strings.LastIndexByte(pointer, '/')
	parentV, ok := lookup(v, pointer[:i])
	if !ok {
		return v
	}
	tok := unescapeToken(pointer[i+1:])
	switch x := parentV.(type) {
	case map[string]any:
		if _, ok := x[tok]; ok {
			x[tok] = nv
		}
	case []any:
		if n, err := strconv.Atoi(tok); err == nil && n >= 0 && n < len(x) {
			x[n] = nv
		}
	}
	return v
}

func escapeToken(t string) string {
	if !strings.ContainsAny(t, "~/") {
		return t
	}
	t = strings.ReplaceAll(t, "~", "~0")
	return strings.ReplaceAll(t, "/", "~1")
}

func unescapeToken(t string) string {
	if !strings.Contains(t, "~") {
		return t
	}
	t = strings.ReplaceAll(t, "~1", "/")
	return strings.ReplaceAll(t, "~0", "~")
}
