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
// is, the fragment admits nothing that writes for free.
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
	}
	_, err := io.WriteString(w, b.String())
	return err
}
