// Package diag owns lineage's structured diagnostics: a stable code, the JSON
// pointer of the offending value and, for files, file:line:col. Every stage that
// reports a problem in user input (loading, schema validation, CEL, Rego) speaks it.
package diag

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Stable diagnostic codes. Tools may branch on them; never rename one.
const (
	CodeSyntax       = "syntax"        // not JSON / not YAML
	CodeDuplicateKey = "duplicate_key" // a key appears twice in one object
	CodeTooLarge     = "too_large"     // input over the size limit
	CodeTooDeep      = "too_deep"      // nesting over the depth limit
	CodeNumber       = "bad_number"    // number not exactly representable, fractional where an integer is required
	CodeUnknownField = "unknown_field" // additionalProperties: false
	CodeRequired     = "required"      // a required field is missing
	CodeType         = "type"          // wrong JSON type
	CodeSchema       = "schema"        // any other schema violation (range, pattern, enum, ...)
	CodeCELSyntax    = "cel_syntax"
	CodeCELType      = "cel_type"
	CodeRegoParse    = "rego_parse"
	CodeRegoCompile  = "rego_compile"
	CodeRegoPackage  = "rego_package"   // extension package not under lineage.ext
	CodeRegoBuiltin  = "rego_forbidden" // nondeterministic or outside-world builtin
	CodeIO           = "io"             // a file could not be read
	CodeArgsSchema   = "args_schema"    // an args_schema that is not a valid, supported JSON Schema
)

// Position is a place in a source file; Line and Col are 1-based, 0 when unknown.
type Position struct {
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
	Col  int    `json:"col,omitempty"`
}

func (p Position) String() string {
	switch {
	case p.File == "" && p.Line == 0:
		return ""
	case p.Line == 0:
		return p.File
	default:
		return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
	}
}

// Diagnostic is one problem found in user input.
type Diagnostic struct {
	Code    string `json:"code"`
	Pointer string `json:"pointer"` // JSON pointer (RFC 6901); "" is the document root
	Position
	Message string `json:"message"`
}

// String renders "file:line:col: /pointer: message (code)".
func (d Diagnostic) String() string {
	var b strings.Builder
	if p := d.Position.String(); p != "" {
		b.WriteString(p)
		b.WriteString(": ")
	}
	ptr := d.Pointer
	if ptr == "" {
		ptr = "/"
	}
	b.WriteString(ptr)
	b.WriteString(": ")
	b.WriteString(d.Message)
	b.WriteString(" (")
	b.WriteString(d.Code)
	b.WriteString(")")
	return b.String()
}

// List is a set of diagnostics; as an error it prints one per line.
type List []Diagnostic

func (l List) Error() string {
	parts := make([]string, len(l))
	for i, d := range l {
		parts[i] = d.String()
	}
	return strings.Join(parts, "\n")
}

// Sort orders diagnostics by file, line, column, then pointer and code.
func (l List) Sort() {
	sort.SliceStable(l, func(i, j int) bool {
		a, b := l[i], l[j]
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		if a.Col != b.Col {
			return a.Col < b.Col
		}
		if a.Pointer != b.Pointer {
			return a.Pointer < b.Pointer
		}
		return a.Code < b.Code
	})
}

// JSON renders the list as a JSON array (never null).
func (l List) JSON() []byte {
	if l == nil {
		l = List{}
	}
	b, _ := json.MarshalIndent(l, "", "  ")
	return b
}

// Pointer joins reference tokens into a JSON pointer, escaping "~" and "/".
func Pointer(tokens ...string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		t = strings.ReplaceAll(t, "~", "~0")
		b.WriteString(strings.ReplaceAll(t, "/", "~1"))
	}
	return b.String()
}
