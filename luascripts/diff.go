package luascripts

import (
	"fmt"
	"strings"
)

// diffContext is the number of unchanged lines shown around a change.
const diffContext = 3

// maxDiffLines bounds the quadratic line diff; longer inputs are shown
// whole instead.
const maxDiffLines = 4000

type diffOp struct {
	kind byte // ' ', '-', '+'
	text string
}

// unifiedDiff returns a unified diff of a and b (lines), or "" when equal.
func unifiedDiff(a, b []string, nameA, nameB string) string {
	if len(a) > maxDiffLines || len(b) > maxDiffLines {
		return fmt.Sprintf("--- %s\n%s\n+++ %s\n%s\n", nameA, strings.Join(a, "\n"), nameB, strings.Join(b, "\n"))
	}
	ops := diffLines(a, b)
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", nameA, nameB)
	changed := false
	for start := 0; start < len(ops); {
		first := nextChange(ops, start)
		if first < 0 {
			break
		}
		changed = true
		lo := max(first-diffContext, start)
		hi := hunkEnd(ops, first)
		writeHunk(&sb, ops, lo, hi)
		start = hi
	}
	if !changed {
		return ""
	}
	return sb.String()
}

func nextChange(ops []diffOp, from int) int {
	for i := from; i < len(ops); i++ {
		if ops[i].kind != ' ' {
			return i
		}
	}
	return -1
}

// hunkEnd extends a hunk from its first change until more than
// 2*diffContext equal lines follow a change, and ends diffContext lines
// after that last change.
func hunkEnd(ops []diffOp, first int) int {
	last, equal := first, 0
	for i := first; i < len(ops) && equal <= 2*diffContext; i++ {
		if ops[i].kind != ' ' {
			last, equal = i, 0
		} else {
			equal++
		}
	}
	return min(last+1+diffContext, len(ops))
}

func writeHunk(sb *strings.Builder, ops []diffOp, lo, hi int) {
	aStart, bStart := 1, 1
	for _, op := range ops[:lo] {
		if op.kind != '+' {
			aStart++
		}
		if op.kind != '-' {
			bStart++
		}
	}
	aLen, bLen := 0, 0
	for _, op := range ops[lo:hi] {
		if op.kind != '+' {
			aLen++
		}
		if op.kind != '-' {
			bLen++
		}
	}
	fmt.Fprintf(sb, "@@ -%d,%d +%d,%d @@\n", aStart, aLen, bStart, bLen)
	for _, op := range ops[lo:hi] {
		fmt.Fprintf(sb, "%c%s\n", op.kind, op.text)
	}
}

// diffLines computes an edit script from a longest common subsequence.
func diffLines(a, b []string) []diffOp {
	n, m := len(a), len(b)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	ops := make([]diffOp, 0, n+m)
	i, j := 0, 0
	for i < n && j < m {
		switch {
		case a[i] == b[j]:
			ops = append(ops, diffOp{' ', a[i]})
			i, j = i+1, j+1
		case lcs[i+1][j] >= lcs[i][j+1]:
			ops = append(ops, diffOp{'-', a[i]})
			i++
		default:
			ops = append(ops, diffOp{'+', b[j]})
			j++
		}
	}
	for ; i < n; i++ {
		ops = append(ops, diffOp{'-', a[i]})
	}
	for ; j < m; j++ {
		ops = append(ops, diffOp{'+', b[j]})
	}
	return ops
}
