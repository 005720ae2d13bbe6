package lineage_test

import (
	"bufio"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// decisionCite is a decision number in a comment; citedWithTitle is the
// forms that give its title in words: "D53 (verify runs what open runs)",
// "D53: verify runs what open runs" and "(D234, metric labels from fixed sets)".
var (
	decisionCite   = regexp.MustCompile(`(?:^|[^\w/#+-])(D[0-9]{1,3})\b`)
	citedWithTitle = regexp.MustCompile(`^D[0-9]{1,3}( \(|: )|^D[0-9]{1,3}, [a-z]`)
	specSection    = regexp.MustCompile(`(SPEC[ .]|[^C] |\()§[0-9]`)
)

// TestCitationsHaveTitles pins issue 19's "citations with their meaning": a
// code comment that cites a decision of docs/decisions.md gives its title in
// words, not only its number, and no comment cites the sections of a
// specification that is not in the repository (the docs page instead).
func TestCitationsHaveTitles(t *testing.T) {
	out, err := exec.Command("git", "ls-files", "*.go", "*.rego").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	files := strings.Fields(string(out))
	if len(files) < 100 {
		t.Fatalf("git ls-files listed %d Go and Rego files; the tree has hundreds", len(files))
	}
	bare := 0
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			mark := "//"
			if strings.HasSuffix(f, ".rego") {
				mark = "#"
			}
			i := strings.Index(line, mark)
			if i < 0 || (mark == "//" && i > 0 && line[i-1] == ':') { // a URL, not a comment
				continue
			}
			comment := line[i:]
			for _, m := range decisionCite.FindAllStringSubmatchIndex(comment, -1) {
				if !citedWithTitle.MatchString(comment[m[2]:]) {
					bare++
					t.Errorf("%s:%d: decision cited without its title: %s", f, n, strings.TrimSpace(comment))
				}
			}
			if specSection.MatchString(comment) && !strings.Contains(comment, "RFC") {
				t.Errorf("%s:%d: a comment cites a section of the SPEC; name the docs page: %s", f, n, strings.TrimSpace(comment))
			}
		}
		fh.Close()
	}
	if bare > 0 {
		t.Logf("%d bare citations; docs/decisions.md has each title", bare)
	}
}
