// Package docpage reads the fenced code blocks of a documentation page and
// the test directives before them, so that tests run what the docs say
// (test/walkthrough runs whole pages; test/chartrun applies install
// recipes) instead of keeping copies of it.
//
// Directives, on the last non-blank line before a fenced block:
//
//	<!-- test: env -->            the block only exports variables; the test
//	                              exports its own values for exactly those names
//	<!-- test: instead <hook> --> the test runs hook <hook> instead of the block
//	<!-- test: after <hook> -->   the test runs the block, then hook <hook>
package docpage

import (
	"bufio"
	"fmt"
	"regexp"
	"strings"
)

// Block is one fenced code block of a page.
type Block struct {
	// Line is the 1-based line of the opening fence.
	Line int
	// Lang is the fence's info string (sh, yaml, text, ...).
	Lang string
	// Body is the block's content, ending with a newline.
	Body string
	// Directive is "", "env", "instead" or "after".
	Directive string
	// Hook names the hook of an "instead" or "after" directive.
	Hook string
}

// Shell reports whether the block is a command block the test runs.
func (b Block) Shell() bool {
	switch b.Lang {
	case "sh", "bash", "shell":
		return true
	}
	return false
}

var directiveRE = regexp.MustCompile(`^<!--\s*test:\s*(\S+)(?:\s+(\S+))?\s*-->$`)

// Parse returns the fenced code blocks of a Markdown page with their
// directives. It fails on an unclosed fence, an unknown directive, a
// directive not followed by a block, and a directive on a block the test
// does not run.
func Parse(page string) ([]Block, error) {
	var (
		blocks  []Block
		cur     *Block
		pending *Block // a directive waiting for its block
		body    strings.Builder
	)
	sc := bufio.NewScanner(strings.NewReader(page))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if cur != nil {
			if trimmed == "```" {
				cur.Body = body.String()
				blocks = append(blocks, *cur)
				cur = nil
				continue
			}
			body.WriteString(line + "\n")
			continue
		}
		if lang, ok := strings.CutPrefix(trimmed, "```"); ok {
			b := Block{Line: n}
			if f := strings.Fields(lang); len(f) > 0 {
				b.Lang = f[0]
			}
			if pending != nil {
				if !b.Shell() {
					return nil, fmt.Errorf("line %d: a test directive precedes a %q block; only sh blocks run", pending.Line, b.Lang)
				}
				b.Directive, b.Hook = pending.Directive, pending.Hook
				pending = nil
			}
			cur = &b
			body.Reset()
			continue
		}
		if m := directiveRE.FindStringSubmatch(trimmed); m != nil {
			d := Block{Line: n, Directive: m[1], Hook: m[2]}
			switch {
			case d.Directive == "env" && d.Hook == "":
			case (d.Directive == "instead" || d.Directive == "after") && d.Hook != "":
			default:
				return nil, fmt.Errorf("line %d: unknown test directive %q (want env, instead <hook> or after <hook>)", n, trimmed)
			}
			pending = &d
			continue
		}
		if strings.HasPrefix(trimmed, "<!--") && strings.Contains(trimmed, "test:") {
			return nil, fmt.Errorf("line %d: malformed test directive %q", n, trimmed)
		}
		if pending != nil && trimmed != "" {
			return nil, fmt.Errorf("line %d: the test directive is not followed by a code block", pending.Line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("line %d: code block never closed", cur.Line)
	}
	if pending != nil {
		return nil, fmt.Errorf("line %d: the test directive is not followed by a code block", pending.Line)
	}
	return blocks, nil
}

var exportRE = regexp.MustCompile(`^export\s+([A-Za-z_][A-Za-z0-9_]*)=`)

// Exports returns the names an env block exports, in order; it fails on a
// line that is neither an export, a comment nor blank, so that an env block
// cannot hide a command.
func (b Block) Exports() ([]string, error) {
	var names []string
	for i, line := range strings.Split(strings.TrimRight(b.Body, "\n"), "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		m := exportRE.FindStringSubmatch(t)
		if m == nil {
			return nil, fmt.Errorf("line %d: an env block may only export variables, found %q", b.Line+1+i, t)
		}
		names = append(names, m[1])
	}
	return names, nil
}
