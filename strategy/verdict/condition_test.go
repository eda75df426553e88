package verdict

import (
	"strings"
	"testing"
)

func TestCompileRejects(t *testing.T) {
	for _, tc := range []struct {
		name, expr, want string
	}{
		{"syntax", "result[0] <", "Syntax error"},
		{"unknown variable", "res[0] < 0.05", "undeclared reference to 'res'"},
		{"not a bool", "result[0] + 1.0", "must evaluate to a bool"},
		{"string result", "'yes'", "must evaluate to a bool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile(tc.expr)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Compile(%q) error = %v, want it to contain %q", tc.expr, err, tc.want)
			}
		})
	}
}

func TestConditionEval(t *testing.T) {
	for _, tc := range []struct {
		name  string
		expr  string
		value Value
		want  bool
	}{
		{"vector index", "result[0] < 0.05", List([]float64{0.01}), true},
		{"vector index fails", "result[0] < 0.05", List([]float64{0.12}), false},
		{"int literal compares with double", "result[0] < 1", List([]float64{0.5}), true},
		{"all series", "result.all(x, x >= 0.99)", List([]float64{0.995, 0.999}), true},
		{"exists series", "result.exists(x, x < 0.99)", List([]float64{0.995, 0.5}), true},
		{"k8s max", "result.max() < 0.05", List([]float64{0.01, 0.04}), true},
		{"k8s sum", "result.sum() == 3.0", List([]float64{1, 2}), true},
		{"math greatest", "math.greatest(result) <= 2.0", List([]float64{1, 2}), true},
		{"math isInf", "math.isInf(result[0])", List([]float64{posInf()}), true},
		{"scalar", "result >= 0.99", Scalar(0.995), true},
		{"matrix every point", "result.all(s, s.all(v, v < 0.05))", Matrix([][]float64{{0.01, 0.02}, {0.03}}), true},
		{"matrix flatten", "result.flatten().exists(v, v > 0.05)", Matrix([][]float64{{0.01, 0.2}}), true},
		{"size", "size(result) == 2", List([]float64{1, 2}), true},
		{"math abs", "math.abs(result[0]) < 0.1", List([]float64{-0.05}), true},
		{"k8s indexOf", "result.indexOf(2.0) == 1", List([]float64{1, 2}), true},
		{"k8s isSorted", "result.isSorted()", List([]float64{1, 2, 3}), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Compile(tc.expr)
			if err != nil {
				t.Fatalf("Compile(%q): %v", tc.expr, err)
			}
			got, err := c.Eval(tc.value)
			if err != nil {
				t.Fatalf("Eval(%q, %v): %v", tc.expr, tc.value, err)
			}
			if got != tc.want {
				t.Fatalf("Eval(%q, %v) = %v, want %v", tc.expr, tc.value, got, tc.want)
			}
		})
	}
}

func TestConditionEvalErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		expr  string
		value Value
	}{
		{"index out of range", "result[1] < 0.05", List([]float64{0.01})},
		{"dyn not a bool", "result[0]", List([]float64{0.01})},
		{"scalar indexed", "result[0] < 1.0", Scalar(0.5)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Compile(tc.expr)
			if err != nil {
				t.Fatalf("Compile(%q): %v", tc.expr, err)
			}
			if got, err := c.Eval(tc.value); err == nil {
				t.Fatalf("Eval(%q, %v) = %v, want an error", tc.expr, tc.value, got)
			}
		})
	}
}
