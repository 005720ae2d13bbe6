package source

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/lineage-guard/lineage/internal/diag"
	"github.com/lineage-guard/lineage/internal/jsontext"
)

// jsonParser walks encoding/json's token stream, recording positions.
type jsonParser struct {
	d     *Document
	data  []byte
	dec   *json.Decoder
	cur   cursor
	diags diag.List
	fatal bool
}

// errStop unwinds the parser after a syntax error has been recorded.
var errStop = errors.New("stop")

func (d *Document) loadJSON(data []byte) diag.List {
	p := &jsonParser{d: d, data: data, dec: json.NewDecoder(bytes.NewReader(data))}
	p.dec.UseNumber()
	tok, start, err := p.next("")
	if err == nil {
		var v any
		v, err = p.value(tok, start, "", 0)
		if err == nil {
			d.Value = v
			if rest := skipSpace(data, int(p.dec.InputOffset())); rest < len(data) {
				p.errorAt(rest, "", "unexpected data after the end of the document")
			}
		}
	}
	return p.diags
}

func (p *jsonParser) position(off int) diag.Position {
	line, col := p.cur.at(p.data, off)
	return diag.Position{File: p.d.File, Line: line, Col: col}
}

func (p *jsonParser) errorAt(off int, ptr, msg string) {
	p.diags = append(p.diags, diag.Diagnostic{Code: diag.CodeSyntax, Pointer: ptr, Position: p.position(off), Message: msg})
}

// next returns the next token and the offset where it starts.
func (p *jsonParser) next(ptr string) (json.Token, int, error) {
	start := skipSeparators(p.data, int(p.dec.InputOffset()))
	tok, err := p.dec.Token()
	if err != nil {
		p.syntaxError(err, start, ptr)
		return nil, start, errStop
	}
	if _, ok := tok.(string); ok {
		// encoding/json turns a lone surrogate escape into U+FFFD silently.
		if r, at, lone := jsontext.LoneSurrogate(p.data[start:p.dec.InputOffset()]); lone {
			p.errorAt(start+at, ptr, fmt.Sprintf(`lone surrogate \u%04x is not valid Unicode`, r))
			return nil, start, errStop
		}
	}
	return tok, start, nil
}

// syntaxError records err from the decoder. encoding/json's offsets are not
// consistent about pointing at or just before the offending character, so when
// the message names the character, the position is where it really is.
func (p *jsonParser) syntaxError(err error, start int, ptr string) {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		off := int(se.Offset)
		if c, ok := offendingChar(se.Error()); ok {
			from := max(off-1, start, 0)
			if i := bytes.IndexByte(p.data[min(from, len(p.data)):], c); i >= 0 {
				off = from + i
			}
		}
		msg := se.Error()
		if strings.HasSuffix(msg, "'") && strings.HasPrefix(msg, "invalid character ") {
			// encoding/json gives no context right after '{'.
			msg += " looking for beginning of object key string"
		}
		if hasYAMLExt(p.d.File) {
			msg += " (a document that starts with '{' or '[' is read as JSON)"
		}
		p.errorAt(off, ptr, msg)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		p.errorAt(len(p.data), ptr, "unexpected end of input")
	default:
		p.errorAt(start, ptr, err.Error())
	}
}

func hasYAMLExt(file string) bool {
	f := strings.ToLower(file)
	return strings.HasSuffix(f, ".yaml") || strings.HasSuffix(f, ".yml")
}

// offendingChar extracts C from encoding/json's "invalid character 'C' ..."
// messages (C is a Go rune literal whose value is the offending byte).
func offendingChar(msg string) (byte, bool) {
	const prefix = "invalid character "
	i := strings.Index(msg, prefix)
	if i < 0 {
		return 0, false
	}
	rest := msg[i+len(prefix):]
	for e := 3; e <= len(rest) && e <= 12; e++ {
		if rest[e-1] != '\'' {
			continue
		}
		if s, err := strconv.Unquote(rest[:e]); err == nil {
			if r := []rune(s); len(r) == 1 && r[0] < 256 {
				return byte(r[0]), true
			}
		}
	}
	return 0, false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

func skipSeparators(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n' || b[i] == ',' || b[i] == ':') {
		i++
	}
	return i
}

// value converts the value that starts with tok. depth counts the containers
// around it.
func (p *jsonParser) value(tok json.Token, start int, ptr string, depth int) (any, error) {
	line, col := p.cur.at(p.data, start)
	p.d.set(ptr, line, col)
	if _, ok := tok.(string); ok {
		p.d.setText(ptr, line, col+1, 0) // after the opening quote
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth+1 > MaxDepth {
			p.diags = append(p.diags, diag.Diagnostic{Code: diag.CodeTooDeep, Pointer: ptr, Position: p.position(start),
				Message: fmt.Sprintf("nesting deeper than %d levels", MaxDepth)})
			return nil, p.skip(ptr)
		}
		if t == '{' {
			return p.object(ptr, depth+1)
		}
		return p.array(ptr, depth+1)
	case json.Number:
		if msg := numberProblem(string(t)); msg != "" {
			p.diags = append(p.diags, diag.Diagnostic{Code: diag.CodeNumber, Pointer: ptr, Position: p.position(start), Message: msg})
		}
		return t, nil
	default: // string, bool, nil
		return t, nil
	}
}

func (p *jsonParser) object(ptr string, depth int) (any, error) {
	obj := map[string]any{}
	firstLine := map[string]int{}
	for {
		tok, start, err := p.next(ptr)
		if err != nil {
			return nil, err
		}
		if tok == json.Delim('}') {
			return obj, nil
		}
		key, ok := tok.(string)
		if !ok { // encoding/json only yields strings here
			p.errorAt(start, ptr, "object key must be a string")
			return nil, errStop
		}
		kptr := ptr + "/" + escapeToken(key)
		kline, kcol := p.cur.at(p.data, start)
		first, dup := firstLine[key]
		if dup {
			p.diags = append(p.diags, duplicateDiag(p.d.File, kptr, key, kline, kcol, first))
		} else {
			firstLine[key] = kline
			p.d.setKey(kptr, kline, kcol)
		}
		tok, start, err = p.next(kptr)
		if err != nil {
			return nil, err
		}
		if dup {
			// Parse the value for its own errors without overwriting the first one's positions.
			saved := p.d.pos
			p.d.pos = map[string]span{}
			_, err = p.value(tok, start, kptr, depth)
			p.d.pos = saved
		} else {
			obj[key], err = p.value(tok, start, kptr, depth)
		}
		if err != nil {
			return nil, err
		}
	}
}

func duplicateDiag(file, ptr, key string, line, col, firstLine int) diag.Diagnostic {
	return diag.Diagnostic{Code: diag.CodeDuplicateKey, Pointer: ptr,
		Position: diag.Position{File: file, Line: line, Col: col},
		Message:  fmt.Sprintf("duplicate key %s (first at line %d)", quote(key), firstLine)}
}

func (p *jsonParser) array(ptr string, depth int) (any, error) {
	arr := []any{}
	for {
		iptr := ptr + "/" + strconv.Itoa(len(arr))
		tok, start, err := p.next(ptr)
		if err != nil {
			return nil, err
		}
		if tok == json.Delim(']') {
			return arr, nil
		}
		v, err := p.value(tok, start, iptr, depth)
		if err != nil {
			return nil, err
		}
		arr = append(arr, v)
	}
}

// skip consumes the rest of a container whose opening delimiter was just read.
func (p *jsonParser) skip(ptr string) error {
	for level := 1; level > 0; {
		tok, _, err := p.next(ptr)
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			level++
		case json.Delim('}'), json.Delim(']'):
			level--
		}
	}
	return nil
}

// quote renders a user string for a message, shortened when long.
func quote(s string) string {
	return strconv.Quote(abbreviate(s, 60))
}

// abbreviate shortens s to about n characters, marking the cut.
func abbreviate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
