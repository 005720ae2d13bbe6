package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestCITemplates runs the very lineagec commands of the CI templates in
// examples/ci (docs/authoring.md#ci) on a copy of examples/, with a lineagec
// built from this checkout first on PATH and the templates' own variables
// (LINEAGE_POLICY set to the invoice policy).
func TestCITemplates(t *testing.T) {
	if testing.Short() {
		t.Skip("builds lineagec")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "lineagec"), "./cmd/lineagec")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	type template struct {
		file     string
		vars     func(doc map[string]any) map[string]any
		commands func(doc map[string]any) []string
	}
	str := func(v any) string { s, _ := v.(string); return s }
	templates := []template{
		{".github/workflows/lineage.yml",
			func(doc map[string]any) map[string]any { m, _ := doc["env"].(map[string]any); return m },
			func(doc map[string]any) []string {
				var out []string
				jobs, _ := doc["jobs"].(map[string]any)
				job, _ := jobs["policy"].(map[string]any)
				steps, _ := job["steps"].([]any)
				for _, s := range steps {
					m, _ := s.(map[string]any)
					out = append(out, str(m["run"]))
				}
				return out
			}},
		{".gitlab-ci.yml",
			func(doc map[string]any) map[string]any {
				job, _ := doc["lineage"].(map[string]any)
				m, _ := job["variables"].(map[string]any)
				return m
			},
			func(doc map[string]any) []string {
				job, _ := doc["lineage"].(map[string]any)
				var out []string
				for _, s := range job["script"].([]any) {
					out = append(out, str(s))
				}
				return out
			}},
	}
	install := regexp.MustCompile(`^go install github\.com/lineage-guard/lineage/cmd/lineagec@"\$LINEAGEC_VERSION"$`)
	for _, tpl := range templates {
		t.Run(tpl.file, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(root, "examples/ci", tpl.file))
			if err != nil {
				t.Fatal(err)
			}
			var doc map[string]any
			if err := yaml.Unmarshal(raw, &doc); err != nil {
				t.Fatal(err)
			}
			work := t.TempDir()
			if err := os.CopyFS(work, os.DirFS(filepath.Join(root, "examples"))); err != nil {
				t.Fatal(err)
			}
			env := append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "LINEAGE_DATA=")
			for k, v := range tpl.vars(doc) {
				env = append(env, k+"="+str(v))
			}
			env = append(env, "LINEAGE_POLICY=invoice/policy.yaml")
			var ran []string
			installed := false
			for _, cmd := range tpl.commands(doc) {
				cmd = strings.TrimSpace(cmd)
				switch {
				case install.MatchString(cmd):
					installed = true
				case strings.HasPrefix(cmd, "lineagec "):
					sh := exec.Command("sh", "-c", cmd)
					sh.Dir, sh.Env = work, env
					out, err := sh.CombinedOutput()
					if err != nil {
						t.Fatalf("%s: %v\n%s", cmd, err, out)
					}
					ran = append(ran, strings.Fields(cmd)[1])
				}
			}
			if !installed {
				t.Errorf("no go install of lineagec@$LINEAGEC_VERSION")
			}
			if got := strings.Join(ran, " "); got != "check test analyze" {
				t.Errorf("ran lineagec %q, want check, test, analyze", got)
			}
			junit, err := os.ReadFile(filepath.Join(work, "lineage-junit.xml"))
			if err != nil || !strings.Contains(string(junit), `<property name="coverage"`) {
				t.Errorf("lineage-junit.xml has no coverage property (%v)", err)
			}
			var analysis struct {
				MaxSpend int64 `json:"max_spend"`
			}
			b, err := os.ReadFile(filepath.Join(work, "lineage-analysis.json"))
			if err != nil || json.Unmarshal(b, &analysis) != nil || analysis.MaxSpend != 10 {
				t.Errorf("lineage-analysis.json: %v %s", err, b)
			}
		})
	}
}

// TestReadmeAnalyze: the analyze output the README and docs/authoring.md show
// for the invoice policy is what analyze prints.
func TestReadmeAnalyze(t *testing.T) {
	t.Chdir("../..")
	var out strings.Builder
	if err := runAnalyze(analyzeParams{format: formatText}, "examples/invoice/policy.yaml", &out, &out); err != nil {
		t.Fatal(err)
	}
	want := "$ lineagec analyze examples/invoice/policy.yaml\n" + out.String()
	for _, file := range []string{"README.md", "docs/authoring.md"} {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		text := string(raw)
		if file == "docs/authoring.md" { // an indented block
			text = strings.ReplaceAll(text, "\n    ", "\n")
		}
		if !strings.Contains(text, want) {
			t.Errorf("%s does not show what analyze prints:\n%s", file, want)
		}
	}
}
