package verdict

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Kind is the shape of a measured Value.
type Kind int

// Shapes of a Value, as the CEL variable `result` sees them.
const (
	// KindNone is the zero Value: nothing was measured. It is judged like
	// an empty result, never as a number.
	KindNone Kind = iota
	// KindScalar is one number; `result` is a double. The web provider
	// returns it when the JSON path picks one number.
	KindScalar
	// KindList is a list of numbers; `result` is list(double). Prometheus
	// scalars (one element) and instant vectors (one element per series)
	// have this shape.
	KindList
	// KindMatrix is a list of series; `result` is list(list(double)).
	// Prometheus range queries have this shape.
	KindMatrix
)

// maxRenderedValue bounds Value.String so status stays small.
const maxRenderedValue = 200

// Value is what a provider measured. Build one with Scalar, List or Matrix;
// the zero Value holds nothing and is judged an Error.
type Value struct {
	kind   Kind
	scalar float64
	list   []float64
	matrix [][]float64
}

// Scalar returns a single-number Value.
func Scalar(f float64) Value { return Value{kind: KindScalar, scalar: f} }

// List returns a list Value; an empty list is a measurement with no data.
func List(fs []float64) Value { return Value{kind: KindList, list: fs} }

// Matrix returns a list-of-series Value; one without any sample is a
// measurement with no data.
func Matrix(series [][]float64) Value { return Value{kind: KindMatrix, matrix: series} }

// Kind returns the shape of v.
func (v Value) Kind() Kind { return v.kind }

// Empty reports whether v holds no number at all.
func (v Value) Empty() bool {
	switch v.kind {
	case KindNone:
		return true
	case KindScalar:
		return false
	case KindList:
		return len(v.list) == 0
	default:
		for _, s := range v.matrix {
			if len(s) > 0 {
				return false
			}
		}
		return true
	}
}

// HasNaN reports whether any number in v is NaN.
func (v Value) HasNaN() bool {
	found := false
	v.each(func(f float64) {
		if math.IsNaN(f) {
			found = true
		}
	})
	return found
}

func (v Value) each(fn func(float64)) {
	switch v.kind {
	case KindScalar:
		fn(v.scalar)
	case KindList:
		for _, f := range v.list {
			fn(f)
		}
	default:
		for _, s := range v.matrix {
			for _, f := range s {
				fn(f)
			}
		}
	}
}

// cel returns v as the CEL `result` variable.
func (v Value) cel() any {
	switch v.kind {
	case KindScalar:
		return v.scalar
	case KindList:
		return v.list
	default:
		return v.matrix
	}
}

// String renders v for status and messages: a lone number as "0.12", a list
// as "[0.1, 0.2]", a matrix as "[[0.1, 0.2], [0.3]]"; it is cut at 200
// characters.
func (v Value) String() string {
	var b strings.Builder
	switch {
	case v.kind == KindNone:
		return ""
	case v.kind == KindScalar:
		b.WriteString(formatFloat(v.scalar))
	case v.kind == KindList && len(v.list) == 1:
		b.WriteString(formatFloat(v.list[0]))
	case v.kind == KindList:
		writeList(&b, v.list)
	default:
		b.WriteByte('[')
		for i, s := range v.matrix {
			if i > 0 {
				b.WriteString(", ")
			}
			writeList(&b, s)
			if b.Len() > maxRenderedValue {
				break
			}
		}
		b.WriteByte(']')
	}
	return truncate(b.String(), maxRenderedValue)
}

func writeList(b *strings.Builder, fs []float64) {
	b.WriteByte('[')
	for i, f := range fs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(formatFloat(f))
		if b.Len() > maxRenderedValue {
			break
		}
	}
	b.WriteByte(']')
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// truncate cuts s to at most n bytes, on a rune boundary, marking the cut
// with "...".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - 3
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
