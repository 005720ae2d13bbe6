package compiler

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/lineage-guard/lineage/policy"
)

// Manifest describes a compiled policy directory.
type Manifest struct {
	Digest   string            `json:"digest"`
	Query    string            `json:"query"`
	Reject   string            `json:"reject_query"`
	Modules  []string          `json:"modules"`
	Data     string            `json:"policy"`
	Versions map[string]string `json:"versions"`
	// Capabilities names the OPA capabilities file that declares lineage.cel
	// beside the builtins lineage allows (the others are not declared),
	// present only when the policy has CEL constraints (`opa check --capabilities`).
	Capabilities string `json:"capabilities,omitempty"`
	// InputRules and InputDefaultRule are, for a policy with Rego extensions,
	// what the runtime puts in input.rule for each tool (and for unlisted
	// tools): whoever evaluates these modules without the runtime must too.
	InputRules       map[string]json.RawMessage `json:"input_rules,omitempty"`
	InputDefaultRule json.RawMessage            `json:"input_default_rule,omitempty"`
}

// WriteDir writes a compiled policy as a directory: the Rego modules, the
// normalized policy (policy.json), a manifest (manifest.json) and, when the
// policy uses CEL, an OPA capabilities file declaring lineage.cel. It writes
// into a fresh sibling directory and renames it into place, so dir is never
// left half-written; an existing dir is replaced only if it holds a manifest.
func WriteDir(c *policy.Compiled, dir string) error {
	dir = filepath.Clean(dir)
	if info, err := os.Stat(dir); err == nil {
		if !info.IsDir() {
			return fmt.Errorf("%s exists and is not a directory", dir)
		}
		if _, err := os.Stat(filepath.Join(dir, "manifest.json")); err != nil {
			entries, _ := os.ReadDir(dir)
			if len(entries) > 0 {
				return fmt.Errorf("%s exists and is not a compiled policy (no manifest.json): refusing to replace it", dir)
			}
		}
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".tmp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	m := Manifest{Digest: c.Digest, Query: c.Query, Reject: c.RejectQuery, Data: "policy.json", Versions: versions(),
		InputRules: c.Rules, InputDefaultRule: c.DefaultRule}
	write := func(name string, data []byte) error {
		path := filepath.Join(tmp, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		return os.WriteFile(path, data, 0o644)
	}
	for _, mod := range c.Modules {
		if err := write(mod.Name, []byte(mod.Source)); err != nil {
			return err
		}
		m.Modules = append(m.Modules, mod.Name)
	}
	if err := write("policy.json", append(append([]byte{}, c.Document...), '\n')); err != nil {
		return err
	}
	if usesCEL(c) {
		raw, err := json.MarshalIndent(opaCapabilities(), "", "  ")
		if err != nil {
			return err
		}
		if err := write("capabilities.json", raw); err != nil {
			return err
		}
		m.Capabilities = "capabilities.json"
	}
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := write("manifest.json", append(raw, '\n')); err != nil {
		return err
	}
	old := ""
	if _, err := os.Stat(dir); err == nil {
		old = tmp + ".old"
		if err := os.Rename(dir, old); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		if old != "" {
			_ = os.Rename(old, dir)
		}
		return err
	}
	if old != "" {
		return os.RemoveAll(old)
	}
	return nil
}

func usesCEL(c *policy.Compiled) bool {
	for _, m := range c.Modules {
		if m.Name == PolicyModule && strings.Contains(m.Source, celDecl.Name+"(") {
			return true
		}
	}
	return false
}

// versions reports the versions of lineage and of the engines it embeds.
func versions() map[string]string {
	out := map[string]string{"lineage": "devel"}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return out
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		out["lineage"] = v
	}
	for _, d := range info.Deps {
		switch d.Path {
		case "github.com/open-policy-agent/opa":
			out["opa"] = d.Version
		case "github.com/google/cel-go":
			out["cel-go"] = d.Version
		}
	}
	return out
}
