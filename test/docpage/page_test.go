package docpage

import (
	"strings"
	"testing"
)

func TestParseDirectives(t *testing.T) {
	page := "# T\n\n<!-- test: env -->\n```sh\nexport A=1 # one\n\nexport B=two\n```\n\ntext\n\n" +
		"<!-- test: instead flux-install -->\n\n```sh\nflux install\n```\n" +
		"```yaml\nkind: X\n```\n<!-- test: after controller -->\n```bash\nhelm install x\n```\n```\nplain\n```\n"
	blocks, err := Parse(page)
	if err != nil {
		t.Fatal(err)
	}
	type want struct{ lang, directive, hook, body string }
	wants := []want{
		{"sh", "env", "", "export A=1 # one\n\nexport B=two\n"},
		{"sh", "instead", "flux-install", "flux install\n"},
		{"yaml", "", "", "kind: X\n"},
		{"bash", "after", "controller", "helm install x\n"},
		{"", "", "", "plain\n"},
	}
	if len(blocks) != len(wants) {
		t.Fatalf("got %d blocks, want %d: %+v", len(blocks), len(wants), blocks)
	}
	for i, w := range wants {
		b := blocks[i]
		if b.Lang != w.lang || b.Directive != w.directive || b.Hook != w.hook || b.Body != w.body {
			t.Errorf("block %d = %+v, want %+v", i, b, w)
		}
	}
	if blocks[0].Line != 4 {
		t.Errorf("first block at line %d, want 4", blocks[0].Line)
	}
	names, err := blocks[0].Exports()
	if err != nil || strings.Join(names, ",") != "A,B" {
		t.Errorf("Exports = %v, %v; want A,B", names, err)
	}
}

func TestParseRefusesWhatCannotRun(t *testing.T) {
	for name, page := range map[string]string{
		"unclosed fence":          "```sh\necho hi\n",
		"unknown directive":       "<!-- test: skip -->\n```sh\necho\n```\n",
		"hook missing":            "<!-- test: instead -->\n```sh\necho\n```\n",
		"malformed directive":     "<!-- test:instead x y z -->\n```sh\necho\n```\n",
		"directive without block": "<!-- test: env -->\nsome prose\n```sh\necho\n```\n",
		"directive at the end":    "text\n<!-- test: after x -->\n",
		"directive on yaml":       "<!-- test: instead x -->\n```yaml\na: b\n```\n",
	} {
		if _, err := Parse(page); err == nil {
			t.Errorf("%s: Parse accepted\n%s", name, page)
		}
	}
	blocks, err := Parse("<!-- test: env -->\n```sh\nexport A=1\nrm -rf /tmp/x\n```\n")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blocks[0].Exports(); err == nil || !strings.Contains(err.Error(), "rm -rf") {
		t.Errorf("an env block holding a command must be refused, got %v", err)
	}
}
