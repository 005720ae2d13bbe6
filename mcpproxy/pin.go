package mcpproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/internal/canon"
)

// Definition is one tool as the upstream listed it: its name, and every
// member it sent (Raw, the JSON object as received; the proxy never decodes
// it into a struct that would drop what it does not know).
type Definition struct {
	Name string
	Raw  json.RawMessage
}

// Pin is a tool definition's pin (docs/mcp.md, D241 (pins over the whole
// definition)): "sha256:" and the hex SHA-256 of the RFC 8785 canonical JSON
// of the whole definition, and that canonical JSON, which is what the host
// is sent. The one place the proxy computes a digest.
func Pin(def json.RawMessage) (digest string, canonical []byte, err error) {
	c, err := canon.Transform(def)
	if err != nil {
		return "", nil, fmt.Errorf("canonical JSON of the tool's definition: %w", err)
	}
	return canon.Digest(c), c, nil
}

// Digest is the pin of a definition (Pin without the canonical JSON).
func Digest(def json.RawMessage) (string, error) {
	d, _, err := Pin(def)
	return d, err
}

// ListDefinitions connects to an MCP server, lists its tools and returns
// each tool's definition as the server sent it, sorted by name.
func ListDefinitions(ctx context.Context, t mcp.Transport, client *mcp.Implementation) ([]Definition, error) {
	capture := newToolCapture()
	cs, err := mcp.NewClient(client, nil).Connect(ctx, capture.wrap(t), nil)
	if err != nil {
		return nil, fmt.Errorf("connecting to the MCP server: %w", err)
	}
	defer cs.Close()
	capture.reset()
	var defs []Definition
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("listing the MCP server's tools: %w", err)
		}
		raw, ok := capture.definition(tool.Name)
		if !ok {
			return nil, fmt.Errorf("tool %q: the server's list holds no definition named exactly so", tool.Name)
		}
		defs = append(defs, Definition{Name: tool.Name, Raw: raw})
	}
	sort.Slice(defs, func(i, j int) bool { return defs[i].Name < defs[j].Name })
	return defs, nil
}

// readOnly reports whether a definition carries annotations.readOnlyHint: true.
func readOnly(def json.RawMessage) bool {
	var d struct {
		Annotations map[string]json.RawMessage `json:"annotations"`
	}
	if err := json.Unmarshal(def, &d); err != nil {
		return false
	}
	return bytes.Equal(bytes.TrimSpace(d.Annotations["readOnlyHint"]), []byte("true"))
}

// WritePins prints each tool's pin as a YAML policy fragment to paste under
// a policy's tools. Every tool is at cost 0 until the author sets one, and a
// tool not annotated readOnlyHint: true needs a person's approval until the
// author decides otherwise (D243 (pins printed to need approval)): pasted as
// is, the fragment admits nothing that writes for free. Its inputSchema is
// its args_schema, as one line of JSON (a YAML flow); one the compiler
// would refuse is printed as a comment with the reason, so that the fragment
// still compiles (D324 (pins print the inputSchema)).
func WritePins(w io.Writer, defs []Definition) error {
	var b strings.Builder
	b.WriteString("tools:\n")
	for _, d := range defs {
		pin, err := Digest(d.Raw)
		if err != nil {
			return fmt.Errorf("tool %q: %w", d.Name, err)
		}
		name, _ := json.Marshal(d.Name)
		fmt.Fprintf(&b, "  %s:\n    cost: 0\n", name)
		if !readOnly(d.Raw) {
			b.WriteString("    requires_approval: true # not annotated read-only\n")
		}
		fmt.Fprintf(&b, "    pin: %q\n", pin)
		if line := argsSchemaLine(d.Raw); line != "" {
			b.WriteString(line)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// argsSchemaLine is the args_schema line of a tool's rule: its inputSchema,
// canonical JSON, without a top-level $schema (an args_schema is 2020-12 by
// definition, and the keywords it may use mean the same in the drafts MCP
// servers declare); "" for a definition without one.
func argsSchemaLine(def json.RawMessage) string {
	var d struct {
		InputSchema json.RawMessage `json:"inputSchema"`
	}
	if err := json.Unmarshal(def, &d); err != nil || len(d.InputSchema) == 0 {
		return ""
	}
	var schema map[string]json.RawMessage
	if err := json.Unmarshal(d.InputSchema, &schema); err != nil || schema == nil {
		return ""
	}
	delete(schema, "$schema")
	raw, err := json.Marshal(schema)
	if err != nil {
		return ""
	}
	c, err := canon.Transform(raw)
	if err != nil {
		return ""
	}
	if problems := compiler.ArgsSchemaProblems(c); len(problems) > 0 {
		return fmt.Sprintf("    # args_schema: %s\n    #   not usable as is: %s\n", c, oneLine(problems[0]))
	}
	return fmt.Sprintf("    args_schema: %s\n", c)
}

// oneLine keeps a message on its comment line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
