package source

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	jt "github.com/go-json-experiment/json/jsontext"

	"github.com/lineage-guard/lineage/internal/diag"
	"github.com/lineage-guard/lineage/internal/strictjson"
)

// jsonParser walks the token stream of the project's one strict JSON reader
// (internal/strictjson: go-json-experiment's jsontext.Decoder, D230 (one strict JSON reader) one strict
// JSON reader), recording where each token starts. The decoder refuses lone
// surrogates and anything that is not JSON; duplicate names are let through
// to the parser, which reports each with the line of the first, and numbers
// are checked here by strictjson.NumberProblem (D231: numbers a double holds).
type jsonParser struct {
	d     *Document
	data  []byte
	dec   *jt.Decoder
	cur   cursor
	diags diag.List
	key   bool // the token being read is where an object key goes
}

// errStop unwinds the parser after a syntax error has been recorded.
var errStop = errors.New("stop")

// decoderOptions: duplicates are the parser's to report (with the first's
// line); the depth the decoder allows is far beyond MaxDepth, which the
// parser checks, so the decoder's limit is only met by skipped content.
var decoderOptions = jt.AllowDuplicateNames(true)

func (d *Document) loadJSON(data []byte) diag.List {
	p := &jsonParser{d: d, data: data, dec: jt.NewDecoder(bytes.NewReader(data), decoderOptions)}
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
func (p *jsonParser) next(ptr string) (jt.Token, int, error) {
	start := skipSeparators(p.data, int(p.dec.InputOffset()))
	tok, err := p.dec.ReadToken()
	if err != nil {
		p.syntaxError(err, start, ptr)
		return jt.Token{}, start, errStop
	}
	return tok, start, nil
}

// syntaxError records err from the decoder, at the byte it names.
func (p *jsonParser) syntaxError(err error, start int, ptr string) {
	var se *jt.SyntacticError
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		p.errorAt(len(p.data), ptr, "unexpected end of input")
	case errors.As(err, &se):
		off := min(max(int(se.ByteOffset), 0), len(p.data))
		msg := se.Err.Error()
		switch {
		case errors.Is(se.Err, io.ErrUnexpectedEOF):
			p.errorAt(len(p.data), ptr, "unexpected end of input")
			return
		case strings.Contains(msg, "surrogate"):
			if r, at, lone := strictjson.LoneSurrogate(p.data[start:]); lone {
				p.errorAt(start+at, ptr, fmt.Sprintf(`lone surrogate \u%04x is not valid Unicode`, r))
				return
			}
		case strings.Contains(msg, "exceeded max depth"):
			p.diags = append(p.diags, diag.Diagnostic{Code: diag.CodeTooDeep, Pointer: ptr, Position: p.position(off),
				Message: fmt.Sprintf("nesting deeper than %d levels", MaxDepth)})
			return
		}
		msg = syntaxMessage(msg, p.data, off, p.key)
		if hasYAMLExt(p.d.File) {
			msg += " (a document that starts with '{' or '[' is read as JSON)"
		}
		p.errorAt(off, ptr, msg)
	default:
		p.errorAt(start, ptr, err.Error())
	}
}

// syntaxMessage words the decoder's message (what it met, at off) for a
// person reading a policy: a comma before a closing bracket is a trailing
// comma, a bad character where a key goes says a key was expected.
func syntaxMessage(msg string, data []byte, off int, key bool) string {
	if strings.HasPrefix(msg, "invalid character ',' at start of value") {
		if i := skipSpace(data, off+1); i < len(data) && (data[i] == '}' || data[i] == ']') {
			return fmt.Sprintf("trailing comma before '%c' (JSON allows none)", data[i])
		}
	}
	if msg == "missing value after object name" && off < len(data) {
		return fmt.Sprintf("missing value after the key: found '%c' where a value should start", data[off])
	}
	if key {
		msg = strings.Replace(msg, "at start of value", "where an object key (a string in double quotes) should start", 1)
	} else {
		msg = strings.Replace(msg, "at start of value", "where a value should start", 1)
	}
	for _, r := range syntaxWords {
		msg = strings.Replace(msg, r[0], r[1], 1)
	}
	return msg
}

var syntaxWords = [][2]string{
	{"after object name (expecting ':')", "after an object key (expecting ':')"},
	{"after object value (expecting ',' or '}')", "after a value in an object (expecting ',' or '}')"},
	{"after array element (expecting ',' or ']')", "after a value in an array (expecting ',' or ']')"},
}

func hasYAMLExt(file string) bool {
	f := strings.ToLower(file)
	return strings.HasSuffix(f, ".yaml") || strings.HasSuffix(f, ".yml")
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
func (p *jsonParser) value(tok jt.Token, start int, ptr string, depth int) (any, error) {
	line, col := p.cur.at(p.data, start)
	p.d.set(ptr, line, col)
	switch k := tok.Kind(); k {
	case '{', '[':
		if depth+1 > MaxDepth {
			p.diags = append(p.diags, diag.Diagnostic{Code: diag.CodeTooDeep, Pointer: ptr, Position: p.position(start),
				Message: fmt.Sprintf("nesting deeper than %d levels", MaxDepth)})
			return nil, p.skip(ptr)
		}
		if k == '{' {
			return p.object(ptr, depth+1)
		}
		return p.array(ptr, depth+1)
	case '0':
		n := tok.String() // the number as written
		if msg := numberProblem(n, p.d.exactAt(ptr)); msg != "" {
			p.diags = append(p.diags, diag.Diagnostic{Code: diag.CodeNumber, Pointer: ptr, Position: p.position(start), Message: msg})
		}
		return json.Number(n), nil
	case '"':
		p.d.setText(ptr, line, col+1, 0) // after the opening quote
		return tok.String(), nil
	case 't':
		return true, nil
	case 'f':
		return false, nil
	default: // 'n'
		return nil, nil
	}
}

func (p *jsonParser) object(ptr string, depth int) (any, error) {
	obj := map[string]any{}
	firstLine := map[string]int{}
	for {
		p.key = true
		tok, start, err := p.next(ptr)
		p.key = false
		if err != nil {
			return nil, err
		}
		if tok.Kind() == '}' {
			return obj, nil
		}
		key := tok.String() // the decoder yields only strings here
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
		if tok.Kind() == ']' {
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
		switch tok.Kind() {
		case '{', '[':
			level++
		case '}', ']':
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
