package policy

import (
	"encoding/json"
	"fmt"

	"github.com/lineage-guard/lineage/internal/source"
)

// DidYouMean is the hint that goes with an unlisted_tool denial in the text a
// person or a model reads, never in the verdict or the record: `did you mean
// "search"?` for the listed tool closest to tool (the edit distance of the
// "did you mean" of unknown policy fields), or "" when none is close. The one
// home of that hint: D304 (did you mean, for tools).
func DidYouMean(tool string, listed []string) string {
	if s := source.Suggest(tool, listed); s != "" {
		return fmt.Sprintf("did you mean %q?", s)
	}
	return ""
}

// ListedTools returns the names of the tools a policy document (JSON) lists,
// or nil if it cannot be read.
func ListedTools(doc []byte) []string {
	var p struct {
		Tools map[string]json.RawMessage `json:"tools"`
	}
	if json.Unmarshal(doc, &p) != nil {
		return nil
	}
	names := make([]string, 0, len(p.Tools))
	for name := range p.Tools {
		names = append(names, name)
	}
	return names
}
