package verdict

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/cel/library"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// hookEnv is the CEL environment of a hook's successCondition: `status`
// (the HTTP status code) and `body` (the answer, JSON-decoded or text).
var hookEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("status", cel.IntType),
		cel.Variable("body", cel.DynType),
		cel.CrossTypeNumericComparisons(true),
		ext.Strings(),
		ext.Lists(),
		library.Lists(),
	)
})

// HookCondition is a hook's compiled successCondition; the zero value
// says yes to a 2xx status.
type HookCondition struct {
	expr    string
	program cel.Program
}

// CompileHookCondition compiles a CEL expression over `status` and `body`
// that must yield a bool; "" is the default (a 2xx status).
func CompileHookCondition(expr string) (HookCondition, error) {
	if expr == "" {
		return HookCondition{}, nil
	}
	env, err := hookEnv()
	if err != nil {
		return HookCondition{}, fmt.Errorf("building CEL environment: %w", err)
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return HookCondition{}, iss.Err()
	}
	if t := ast.OutputType(); !t.IsExactType(types.BoolType) && !t.IsExactType(types.DynType) {
		return HookCondition{}, fmt.Errorf("must evaluate to a bool, not %s", t)
	}
	prg, err := env.Program(ast, cel.CostLimit(costLimit))
	if err != nil {
		return HookCondition{}, err
	}
	return HookCondition{expr: expr, program: prg}, nil
}

// Yes reports whether an answer of status with body (decoded JSON, or the
// text) means yes.
func (c HookCondition) Yes(status int, body any) (bool, error) {
	if c.program == nil {
		return status >= 200 && status < 300, nil
	}
	out, _, err := c.program.Eval(map[string]any{"status": int64(status), "body": body})
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, errors.New("successCondition did not evaluate to a bool")
	}
	return b, nil
}

// ValidateHooks checks hooks declared at path: one of url or job, a
// condition that compiles, known placeholders in the URL, and a Job spec
// as a Job check's (with the {{rollout.*}} placeholders only: a hook has
// no args).
func ValidateHooks(hooks []v1alpha1.Hook, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, h := range hooks {
		hp := p.Index(i)
		switch {
		case (h.URL == "") == (h.Job == nil):
			errs = append(errs, field.Invalid(hp, h.Name, "set exactly one of url (an HTTP call) or job (a Kubernetes Job)"))
		case h.Job != nil && h.Confirm:
			errs = append(errs, field.Invalid(hp.Child("confirm"), true, "confirm is for url hooks: a Job hook answers once per Job"))
		case h.Job != nil:
			errs = append(errs, validateJob(h.Job, hp.Child("job"), nil)...)
		}
		if _, err := CompileHookCondition(h.SuccessCondition); err != nil {
			errs = append(errs, field.Invalid(hp.Child("successCondition"), h.SuccessCondition, err.Error()))
		}
		if err := CheckPlaceholders(h.URL, nil); err != nil {
			errs = append(errs, field.Invalid(hp.Child("url"), h.URL, err.Error()))
		}
		for name, d := range map[string]*metav1.Duration{"interval": h.Interval, "timeout": h.Timeout} {
			if d != nil && d.Duration < time.Second {
				errs = append(errs, field.Invalid(hp.Child(name), d.Duration.String(), "must be at least 1s"))
			}
		}
	}
	return errs
}
