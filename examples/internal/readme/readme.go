// Package readme keeps the README's Go examples compiling: each is the
// code of an example's main.go between the lines "// README begin" and
// "// README end", and each example's test checks that with Check.
package readme

import (
	"os"
	"strings"
	"testing"
)

// Check fails t unless the first ```go block of ../../README.md after the
// line "## "+section (after the start, for section "") is, line for line,
// main.go's README lines with one tab of indentation removed.
func Check(t testing.TB, section string) {
	t.Helper()
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	in := false
	for _, l := range strings.Split(string(src), "\n") {
		switch strings.TrimSpace(l) {
		case "// README begin":
			in = true
		case "// README end":
			in = false
		default:
			if in {
				want = append(want, strings.TrimPrefix(l, "\t"))
			}
		}
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text, ok := string(readme), true
	if section != "" {
		_, text, ok = strings.Cut(text, "\n## "+section+"\n")
	}
	var block string
	if ok {
		_, block, ok = strings.Cut(text, "```go\n")
	}
	if ok {
		block, _, ok = strings.Cut(block, "```")
	}
	if !ok {
		t.Fatalf("README.md has no ```go block under %q", "## "+section)
	}
	got := strings.Split(strings.TrimSuffix(block, "\n"), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("README.md's example differs from main.go's README lines; README:\n%s\nmain.go:\n%s",
			strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
