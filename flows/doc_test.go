package flows

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docPath is the pipeline reference whose generated blocks mirror the declarations of tables.go,
// fields.go and registry.go.
const docPath = "../docs/pipeline.md"

// generatedBlocks renders each generated block of docs/pipeline.md from the declarations.
func generatedBlocks() map[string]string {
	var tb strings.Builder
	tb.WriteString("| bridge | table | name |\n|---|---|---|\n")
	for _, b := range []Bridge{BrEx, BrInt} {
		for _, t := range tableNames[b] {
			fmt.Fprintf(&tb, "| %s | %d | `%s` |\n", b, int(t.id), t.name)
		}
	}
	var fb strings.Builder
	fb.WriteString("| what | value | meaning |\n|---|---|---|\n")
	for _, f := range Fields() {
		fmt.Fprintf(&fb, "| %s | %s | %s |\n", f.What, f.Value, f.Meaning)
	}
	var kb strings.Builder
	kb.WriteString("| kind | value | bridge | flow set |\n|---|---|---|---|\n")
	for _, k := range Kinds() {
		fmt.Fprintf(&kb, "| %s | %#02x | %s | %s |\n", k.Name, uint8(k.Kind), k.Bridge, k.Doc)
	}
	var db strings.Builder
	db.WriteString("| reason | where (bridge table priority, kind) | meaning |\n|---|---|---|\n")
	for _, d := range DropInfos() {
		var where []string
		for _, s := range d.Spots {
			where = append(where, fmt.Sprintf("%s `%s` %d, %s", s.Bridge, s.Table.Name(s.Bridge), s.Priority, s.Kind))
		}
		if len(where) == 0 {
			where = []string{"no flow"}
		}
		fmt.Fprintf(&db, "| `%s` | %s | %s |\n", d.Reason, strings.Join(where, "; "), d.Doc)
	}
	return map[string]string{"tables": tb.String(), "fields": fb.String(), "kinds": kb.String(), "drops": db.String()}
}

var blockRE = regexp.MustCompile(`(?s)(<!-- generated: (\w+) .*?-->\n)(.*?)(<!-- end generated -->)`)

// TestPipelineDoc checks the generated blocks of docs/pipeline.md against the declarations
// (go test ./flows -update rewrites them).
func TestPipelineDoc(t *testing.T) {
	doc, err := os.ReadFile(docPath)
	require.NoError(t, err)
	want := generatedBlocks()
	seen := map[string]bool{}
	got := blockRE.ReplaceAllStringFunc(string(doc), func(m string) string {
		sm := blockRE.FindStringSubmatch(m)
		name := sm[2]
		seen[name] = true
		body, ok := want[name]
		if !ok {
			t.Errorf("docs/pipeline.md: unknown generated block %q", name)
			return m
		}
		if !*update {
			require.Equal(t, body, sm[3], "docs/pipeline.md block %q differs from the declarations; run go test ./flows -update", name)
		}
		return sm[1] + body + sm[4]
	})
	for name := range want {
		require.True(t, seen[name], "docs/pipeline.md lacks the generated block %q", name)
	}
	if *update {
		require.NoError(t, os.WriteFile(docPath, []byte(got), 0o644))
	}
}
