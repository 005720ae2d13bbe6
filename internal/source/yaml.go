package source

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/lineage-guard/lineage/internal/diag"
	"go.yaml.in/yaml/v3"
)

// yamlConv converts a yaml.Node tree into plain JSON values, recording positions.
type yamlConv struct {
	d      *Document
	data   []byte
	diags  diag.List
	nodes  int                // values produced so far, aliases expanded
	stop   bool               // too many nodes: give up
	active map[*yaml.Node]int // anchored nodes being expanded (alias cycle guard)
	pairs  map[*yaml.Node][]pair
}

// pair is one effective member of a mapping: explicit, or merged in with "<<".
type pair struct {
	key      string
	keyNode  *yaml.Node // for the key's position
	value    *yaml.Node
	explicit bool
}

func (d *Document) loadYAML(data []byte) diag.List {
	root, diags := parseYAML(d.File, data)
	if len(diags) > 0 {
		return diags
	}
	c := &yamlConv{d: d, data: data, active: map[*yaml.Node]int{}, pairs: map[*yaml.Node][]pair{}}
	// Refuse alias bombs before building anything.
	if n := expandedSize(root, map[*yaml.Node]int{}, 0); n > maxNodes {
		return diag.List{{Code: diag.CodeTooLarge, Position: diag.Position{File: d.File, Line: root.Line, Col: root.Column},
			Message: fmt.Sprintf("document expands to more than %d values (aliases included)", maxNodes)}}
	}
	v := c.value(root, "", 0, true)
	if !c.stop {
		d.Value = v
	}
	return c.diags
}

var yamlErrLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseYAML parses exactly one YAML document and returns its root node.
func parseYAML(file string, data []byte) (root *yaml.Node, diags diag.List) {
	defer func() {
		if r := recover(); r != nil {
			diags = diag.List{{Code: diag.CodeSyntax, Position: diag.Position{File: file},
				Message: fmt.Sprintf("cannot parse YAML (parser failure: %v)", r)}}
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, diag.List{{Code: diag.CodeSyntax, Position: diag.Position{File: file}, Message: "empty document"}}
		}
		return nil, diag.List{yamlError(file, data, err)}
	}
	var second yaml.Node
	switch err := dec.Decode(&second); {
	case err == nil:
		return nil, diag.List{{Code: diag.CodeSyntax, Position: diag.Position{File: file, Line: second.Line, Col: max(second.Column, 1)},
			Message: "a second YAML document starts here; a file holds exactly one document"}}
	case !errors.Is(err, io.EOF):
		return nil, diag.List{yamlError(file, data, err)}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || isEmptyScalar(doc.Content[0]) {
		return nil, diag.List{{Code: diag.CodeSyntax, Position: diag.Position{File: file}, Message: "empty document"}}
	}
	return doc.Content[0], nil
}

// isEmptyScalar reports whether n is nothing at all (as in a file holding only
// "---"), as opposed to an explicit null such as "~".
func isEmptyScalar(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Value == "" && n.Style == 0 && n.Anchor == ""
}

// yamlError turns a yaml.v3 error ("yaml: line 3: found ...") into a
// diagnostic. yaml.v3 reports lines only; the column is the tab that breaks
// the indentation, when there is one, else the start of the line's content.
func yamlError(file string, data []byte, err error) diag.Diagnostic {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := yamlErrLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
		if strings.HasPrefix(msg, "did not find expected ") {
			if l := problemLine(data, msg); l > 0 {
				line = l
			}
		}
	} else if strings.HasPrefix(msg, "unknown anchor '") {
		name := strings.TrimSuffix(strings.TrimPrefix(msg, "unknown anchor '"), "' referenced")
		if i := bytes.Index(data, []byte("*"+name)); i >= 0 {
			l, c := lineCol(data, i)
			return diag.Diagnostic{Code: diag.CodeSyntax, Position: diag.Position{File: file, Line: l, Col: c},
				Message: fmt.Sprintf("alias *%s refers to no anchor (&%s) defined before it", name, name)}
		}
	} else if !strings.Contains(msg, "corrupted value") {
		line = 1 // yaml.v3 leaves out "line 1"
	}
	pos := diag.Position{File: file}
	if text, ok := lineText(data, line); ok {
		pos.Line, pos.Col = line, 1
		indent := len(text) - len(strings.TrimLeft(text, " \t"))
		if t := strings.IndexByte(text[:indent], '\t'); t >= 0 {
			pos.Col = t + 1
			msg = "tab character in indentation; YAML indents with spaces only (" + msg + ")"
		} else if strings.TrimSpace(text) != "" {
			pos.Col = len([]rune(text[:indent])) + 1
		}
	} else if line > 0 {
		pos.Line, pos.Col = line, 1
	}
	return diag.Diagnostic{Code: diag.CodeSyntax, Position: pos, Message: msg}
}

// problemLine returns the line where the parser meets the token that makes
// msg, or 0. For "did not find expected …" yaml.v3 names the line of the
// construct it was parsing (a block mapping that starts lines earlier), not
// the line of the token it found instead; that line is the first whose
// prefix of the document fails with the same message while the prefix one
// line shorter parses: D300 (a YAML error names its line).
func problemLine(data []byte, msg string) int {
	var ends []int // ends[i] is the length of the first i+1 lines
	for i, b := range data {
		if b == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(ends) == 0 || ends[len(ends)-1] != len(data) {
		ends = append(ends, len(data))
	}
	fails := func(n int) (same, any bool) { // parsing the first n lines
		if n == 0 {
			return false, false
		}
		dec := yaml.NewDecoder(bytes.NewReader(data[:ends[n-1]]))
		for {
			var doc yaml.Node
			err := dec.Decode(&doc)
			if errors.Is(err, io.EOF) {
				return false, false
			}
			if err != nil {
				m := yamlErrLine.FindStringSubmatch(err.Error())
				return m != nil && m[2] == msg, true
			}
		}
	}
	lo, hi := 1, len(ends) // the answer is in [lo, hi] if the whole fails
	if same, _ := fails(hi); !same {
		return 0
	}
	for lo < hi {
		mid := (lo + hi) / 2
		if same, _ := fails(mid); same {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	if _, failed := fails(lo - 1); failed {
		return 0 // the prefixes do not tell: keep the parser's line
	}
	return lo
}

// lineText returns the text of 1-based line n.
func lineText(data []byte, n int) (string, bool) {
	if n < 1 {
		return "", false
	}
	for i := 1; i < n; i++ {
		j := bytes.IndexByte(data, '\n')
		if j < 0 {
			return "", false
		}
		data = data[j+1:]
	}
	if j := bytes.IndexByte(data, '\n'); j >= 0 {
		data = data[:j]
	}
	return strings.TrimSuffix(string(data), "\r"), true
}

// recordText notes where a scalar's text starts: past the quote of a quoted
// scalar; at the first non-blank line after a block scalar's indicator, whose
// indentation every content line shares.
func (c *yamlConv) recordText(n *yaml.Node, ptr string) {
	switch {
	case n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0:
		c.d.setText(ptr, n.Line, n.Column+1, 0)
	case n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0:
		lines := bytes.Split(c.data, []byte("\n"))
		for l := n.Line; l < len(lines); l++ { // lines[l] is line l+1
			text := bytes.TrimRight(lines[l], " \r")
			if len(text) == 0 {
				continue
			}
			indent := len(text) - len(bytes.TrimLeft(text, " ")) + 1
			c.d.setText(ptr, l+1, indent, indent)
			return
		}
	default:
		c.d.setText(ptr, n.Line, n.Column, 0)
	}
}

func (c *yamlConv) errorf(n *yaml.Node, ptr, code, format string, args ...any) {
	c.diags = append(c.diags, diag.Diagnostic{Code: code, Pointer: ptr,
		Position: diag.Position{File: c.d.File, Line: n.Line, Col: n.Column},
		Message:  fmt.Sprintf(format, args...)})
}

// count accounts for one more value and reports whether to go on.
func (c *yamlConv) count(n *yaml.Node, ptr string) bool {
	if c.stop {
		return false
	}
	c.nodes++
	if c.nodes > maxNodes {
		c.errorf(n, ptr, diag.CodeTooLarge, "document expands to more than %d values (aliases included)", maxNodes)
		c.stop = true
		return false
	}
	return true
}

// value converts n, the value at ptr inside depth containers. record says
// whether n's position is the one to record for ptr (false for the target of
// an alias: the alias itself is where the value appears).
func (c *yamlConv) value(n *yaml.Node, ptr string, depth int, record bool) any {
	if !c.count(n, ptr) {
		return nil
	}
	if record {
		c.d.set(ptr, n.Line, n.Column)
		if n.Kind == yaml.ScalarNode {
			c.recordText(n, ptr)
		}
	}
	switch n.Kind {
	case yaml.AliasNode:
		target := n.Alias
		if target == nil {
			c.errorf(n, ptr, diag.CodeSyntax, "alias *%s refers to no anchor", n.Value)
			return nil
		}
		if c.active[target] > 0 {
			c.errorf(n, ptr, diag.CodeSyntax, "alias *%s refers to a node that contains it", n.Value)
			return nil
		}
		return c.value(target, ptr, depth, false)
	case yaml.ScalarNode:
		return c.scalar(n, ptr)
	case yaml.MappingNode, yaml.SequenceNode:
		if depth+1 > MaxDepth {
			c.errorf(n, ptr, diag.CodeTooDeep, "nesting deeper than %d levels", MaxDepth)
			return nil
		}
		if n.Style&yaml.TaggedStyle != 0 && n.Tag != "!!map" && n.Tag != "!!seq" {
			c.errorf(n, ptr, diag.CodeSyntax, "unsupported tag %s (only the YAML core schema tags are allowed)", n.Tag)
			return nil
		}
		c.active[n]++ // an alias inside n to n itself would never end
		defer func() { c.active[n]-- }()
		if n.Kind == yaml.SequenceNode {
			arr := make([]any, 0, len(n.Content))
			for i, item := range n.Content {
				arr = append(arr, c.value(item, ptr+"/"+strconv.Itoa(i), depth+1, true))
			}
			return arr
		}
		obj := map[string]any{}
		for _, p := range c.members(n, ptr, 0) {
			kptr := ptr + "/" + escapeToken(p.key)
			c.d.setKey(kptr, p.keyNode.Line, p.keyNode.Column)
			obj[p.key] = c.value(p.value, kptr, depth+1, true)
		}
		return obj
	default:
		c.errorf(n, ptr, diag.CodeSyntax, "unexpected YAML node")
		return nil
	}
}

// expandedSize bounds the number of values n expands to, aliases and merges
// included, saturating just above maxNodes. Sizes are memoized per node, so
// the cost is linear in the size of the node tree however deep aliases nest.
func expandedSize(n *yaml.Node, memo map[*yaml.Node]int, depth int) int {
	if n == nil {
		return 0
	}
	if s, ok := memo[n]; ok {
		return s
	}
	if depth > MaxDepth+2 {
		return 1 // too deep anyway: the conversion reports it
	}
	memo[n] = 1 // an alias cycle counts once; the conversion reports it
	size := 1
	switch n.Kind {
	case yaml.AliasNode:
		size += expandedSize(n.Alias, memo, depth)
	case yaml.MappingNode, yaml.SequenceNode, yaml.DocumentNode:
		for _, child := range n.Content {
			size += expandedSize(child, memo, depth+1)
			if size > maxNodes {
				break
			}
		}
	}
	size = min(size, maxNodes+1)
	memo[n] = size
	return size
}

// members returns the effective members of mapping n: its own keys, then keys
// merged in with "<<" that it does not define itself (earlier merges win).
// Results are memoized: aliases and merges may reach one mapping many times.
func (c *yamlConv) members(n *yaml.Node, ptr string, depth int) []pair {
	if ps, ok := c.pairs[n]; ok {
		return ps
	}
	if depth > MaxDepth {
		c.errorf(n, ptr, diag.CodeTooDeep, "merge keys (<<) nested deeper than %d levels", MaxDepth)
		return nil
	}
	c.pairs[n] = nil // a merge cycle sees no members
	var out []pair
	first := map[string]*yaml.Node{}
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		key, ok := c.key(k, ptr)
		if !ok {
			continue
		}
		if f, dup := first[key]; dup {
			c.errorf(k, ptr+"/"+escapeToken(key), diag.CodeDuplicateKey, "duplicate key %s (first at line %d)", quote(key), f.Line)
			continue
		}
		first[key] = k
		out = append(out, pair{key: key, keyNode: k, value: v, explicit: true})
	}
	for _, m := range merges {
		for _, src := range c.mergeSources(m, ptr) {
			for _, p := range c.members(src, ptr, depth+1) {
				if _, ok := first[p.key]; !ok {
					first[p.key] = p.keyNode
					p.explicit = false
					out = append(out, p)
				}
			}
		}
	}
	c.pairs[n] = out
	return out
}

// mergeSources returns the mappings a "<<" value names: a mapping, or a
// sequence of mappings, either possibly through aliases.
func (c *yamlConv) mergeSources(v *yaml.Node, ptr string) []*yaml.Node {
	deref := func(n *yaml.Node) *yaml.Node {
		for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
			n = n.Alias
		}
		return n
	}
	t := deref(v)
	switch {
	case t != nil && t.Kind == yaml.MappingNode:
		return []*yaml.Node{t}
	case t != nil && t.Kind == yaml.SequenceNode:
		var out []*yaml.Node
		for _, item := range t.Content {
			if m := deref(item); m != nil && m.Kind == yaml.MappingNode {
				out = append(out, m)
			} else {
				c.errorf(item, ptr, diag.CodeSyntax, "a merge key (<<) takes a mapping or a list of mappings")
			}
		}
		return out
	}
	c.errorf(v, ptr, diag.CodeSyntax, "a merge key (<<) takes a mapping or a list of mappings")
	return nil
}

// key returns the member name of a mapping key. Any scalar key stands for its
// text as written (so `123:` names the tool "123"); collections are refused.
func (c *yamlConv) key(k *yaml.Node, ptr string) (string, bool) {
	n := k
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	if n.Kind != yaml.ScalarNode {
		c.errorf(k, ptr, diag.CodeSyntax, "mapping keys must be strings, not a %s", kindName(n))
		return "", false
	}
	if n.Style&yaml.TaggedStyle != 0 && !coreTags[n.Tag] {
		c.errorf(k, ptr, diag.CodeSyntax, "unsupported tag %s (only the YAML core schema tags are allowed)", n.Tag)
		return "", false
	}
	return n.Value, true
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "sequence"
	case yaml.AliasNode:
		return "alias"
	}
	return "scalar"
}

var coreTags = map[string]bool{"!!str": true, "!!int": true, "!!float": true, "!!bool": true, "!!null": true}

// scalar resolves a scalar the way yaml.v3 does (YAML 1.2 core schema tags)
// into a JSON value: numbers become json.Number in decimal notation.
func (c *yamlConv) scalar(n *yaml.Node, ptr string) any {
	explicit := n.Style&yaml.TaggedStyle != 0
	tag := n.ShortTag()
	switch tag {
	case "!!str":
		if n.Style == 0 && !strings.Contains(n.Value, "_") {
			// A plain scalar in YAML 1.2's float form that yaml.v3 could not
			// hold (1e400, 1e-400) is a number, refused as JSON's would be.
			if s, ok := yamlFloatJSON(n.Value); ok {
				return c.number(n, ptr, s)
			}
		}
		return n.Value
	case "!!merge":
		if !explicit {
			return n.Value // a plain "<<" that is not a key is just text
		}
	case "!!timestamp":
		if !explicit {
			return n.Value // YAML 1.1 dates are text in JSON
		}
	case "!!null", "!!bool", "!!int", "!!float":
		return c.typed(n, ptr, tag, explicit)
	}
	c.errorf(n, ptr, diag.CodeSyntax, "unsupported tag %s (only the YAML core schema tags are allowed)", tag)
	return nil
}

func (c *yamlConv) typed(n *yaml.Node, ptr, tag string, explicit bool) any {
	var v any
	if explicit {
		if err := n.Decode(&v); err != nil {
			msg := strings.TrimPrefix(err.Error(), "yaml: ")
			msg = strings.TrimPrefix(msg, "unmarshal errors:\n  ")
			c.errorf(n, ptr, diag.CodeSyntax, "%s", msg)
			return nil
		}
	} else {
		v = resolvePlain(n.Value, tag)
	}
	switch x := v.(type) {
	case nil, bool:
		return x
	case int:
		return c.number(n, ptr, strconv.FormatInt(int64(x), 10))
	case int64:
		return c.number(n, ptr, strconv.FormatInt(x, 10))
	case uint64:
		return c.number(n, ptr, strconv.FormatUint(x, 10))
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			c.errorf(n, ptr, diag.CodeNumber, "%s is not a number JSON can represent", n.Value)
			return nil
		}
		if s, ok := yamlFloatJSON(n.Value); ok {
			return c.number(n, ptr, s)
		}
		return c.number(n, ptr, strconv.FormatFloat(x, 'g', -1, 64))
	case string:
		return x
	}
	c.errorf(n, ptr, diag.CodeSyntax, "cannot represent %s %q in JSON", tag, n.Value)
	return nil
}

// legacyOctal matches integers with a leading zero, which yaml.v3 reads as
// YAML 1.1 octal (0100 is 64) and YAML 1.2 as decimal (100).
var legacyOctal = regexp.MustCompile(`^[-+]?0[0-9_]*[0-9][0-9_]*$`)

func (c *yamlConv) number(n *yaml.Node, ptr, text string) any {
	if v := n.Value; legacyOctal.MatchString(v) && strings.Trim(v, "-+0_") != "" {
		sign := ""
		if v[0] == '-' {
			sign = "-"
		}
		digits := strings.TrimLeft(strings.TrimLeft(v, "-+"), "0_")
		c.errorf(n, ptr, diag.CodeNumber, "ambiguous number %s: a leading 0 means octal in YAML 1.1 but not in YAML 1.2; write %s%s (decimal) or %s0o%s (octal)",
			v, sign, digits, sign, digits)
		return nil
	}
	if msg := numberProblem(text, c.d.exactAt(ptr)); msg != "" {
		c.errorf(n, ptr, diag.CodeNumber, "%s", msg)
	}
	return json.Number(text)
}

// resolvePlain computes the value of an untagged plain scalar that yaml.v3
// resolved to tag, mirroring yaml.v3's resolve without its per-call decoder.
func resolvePlain(s, tag string) any {
	switch tag {
	case "!!null":
		return nil
	case "!!bool":
		return s == "true" || s == "True" || s == "TRUE"
	case "!!int":
		plain := strings.ReplaceAll(s, "_", "")
		if i, err := strconv.ParseInt(plain, 0, 64); err == nil {
			return i
		}
		if u, err := strconv.ParseUint(plain, 0, 64); err == nil {
			return u
		}
	case "!!float":
		switch s {
		case ".nan", ".NaN", ".NAN":
			return math.NaN()
		case ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF":
			return math.Inf(1)
		}
		if f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64); err == nil {
			return f
		}
	}
	// Not expected: fall back to yaml.v3 itself.
	var v any
	n := yaml.Node{Kind: yaml.ScalarNode, Value: s}
	if err := n.Decode(&v); err != nil {
		return s
	}
	return v
}
