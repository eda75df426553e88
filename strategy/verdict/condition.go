package verdict

import (
	"errors"
	"fmt"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
	"k8s.io/apiserver/pkg/cel/library"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// costLimit bounds the work one condition may do on one value, so a large
// matrix and a nested comprehension cannot stall the controller.
const costLimit = 1_000_000

// celEnv is built once: it is immutable after construction.
var celEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("result", cel.DynType),
		cel.CrossTypeNumericComparisons(true),
		ext.Math(),
		ext.Lists(),
		library.Lists(),
	)
})

// Condition is a compiled successCondition or failureCondition.
type Condition struct {
	expr    string
	program cel.Program
}

// Compile compiles a CEL expression over `result` that must yield a bool.
// Besides the standard CEL macros (all, exists, filter, map) the expression
// may use the cel-go math and lists extensions (math.isNaN, math.greatest,
// math.least, math.abs, flatten) and the Kubernetes list functions
// (sum, min, max, isSorted). The error carries the CEL diagnostics; callers
// prefix it with the field path.
func Compile(expr string) (Condition, error) {
	env, err := celEnv()
	if err != nil {
		return Condition{}, fmt.Errorf("building CEL environment: %w", err)
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return Condition{}, iss.Err()
	}
	if t := ast.OutputType(); !t.IsExactType(types.BoolType) && !t.IsExactType(types.DynType) {
		return Condition{}, fmt.Errorf("must evaluate to a bool, not %s", t)
	}
	prg, err := env.Program(ast, cel.CostLimit(costLimit))
	if err != nil {
		return Condition{}, err
	}
	return Condition{expr: expr, program: prg}, nil
}

// String returns the source expression.
func (c Condition) String() string { return c.expr }

// IsZero reports whether c is unset (the metric does not have this
// condition).
func (c Condition) IsZero() bool { return c.program == nil }

// Eval evaluates c with `result` bound to v.
func (c Condition) Eval(v Value) (bool, error) {
	if c.program == nil {
		return false, errors.New("condition not compiled")
	}
	out, _, err := c.program.Eval(map[string]any{"result": v.cel()})
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("evaluated to %v (%s), not a bool", out.Value(), out.Type().TypeName())
	}
	return b, nil
}

// Conditions are a metric's compiled conditions; either may be unset.
type Conditions struct {
	// Success is the compiled successCondition.
	Success Condition
	// Failure is the compiled failureCondition.
	Failure Condition
}

// CompileMetric compiles both conditions of m. The error names the field
// relative to the metric ("successCondition: ..."), and it is an error for
// both to be empty.
func CompileMetric(m *v1alpha1.Metric) (Conditions, error) {
	var c Conditions
	var errs []error
	if m.SuccessCondition == "" && m.FailureCondition == "" {
		return c, errors.New("successCondition or failureCondition is required")
	}
	if m.SuccessCondition != "" {
		s, err := Compile(m.SuccessCondition)
		if err != nil {
			errs = append(errs, fmt.Errorf("successCondition: %w", err))
		}
		c.Success = s
	}
	if m.FailureCondition != "" {
		f, err := Compile(m.FailureCondition)
		if err != nil {
			errs = append(errs, fmt.Errorf("failureCondition: %w", err))
		}
		c.Failure = f
	}
	return c, errors.Join(errs...)
}
