package mcpproxy

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lineage-guard/lineage/internal/canon"
)

// Digest is the pin of an MCP tool definition (docs/policy.md, docs/mcp.md): "sha256:" and
// the hex SHA-256 of the RFC 8785 canonical JSON of the tool's {name,
// description, inputSchema, annotations}, as the Go SDK decodes them from the
// upstream (decision D113: an absent description is "", absent annotations are
// left out, absent boolean hints are false).
func Digest(t *mcp.Tool) (string, error) {
	def := map[string]any{"name": t.Name, "description": t.Description, "inputSchema": t.InputSchema}
	if t.Annotations != nil {
		def["annotations"] = t.Annotations
	}
	raw, err := json.Marshal(def)
	if err != nil {
		return "", fmt.Errorf("mcpproxy: tool %q: encoding its definition: %w", t.Name, err)
	}
	doc, err := canon.Transform(raw)
	if err != nil {
		return "", fmt.Errorf("mcpproxy: tool %q: canonical JSON of its definition: %w", t.Name, err)
	}
	return canon.Digest(doc), nil
}

// WritePins prints each tool's digest as a YAML policy fragment to paste
// under a policy's tools (cost 0 until the author sets one).
func WritePins(w io.Writer, tools []*mcp.Tool) error {
	sorted := append([]*mcp.Tool(nil), tools...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	var b strings.Builder
	b.WriteString("tools:\n")
	for _, t := range sorted {
		d, err := Digest(t)
		if err != nil {
			return err
		}
		name, _ := json.Marshal(t.Name)
		fmt.Fprintf(&b, "  %s:\n    cost: 0\n    pin: %q\n", name, d)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
