package strategy

import (
	"errors"
	"fmt"
)

// ErrInvalidSpec is wrapped by every error about a spec the planner cannot
// act on. Retrying does not help: the reconciler reports Stalled with reason
// InvalidSpec and waits for a new generation.
var ErrInvalidSpec = errors.New("invalid spec")

// SpecError is an invalid spec found while planning, such as step replicas
// that decrease once resolved against the workload's size.
type SpecError struct {
	// Field is the path of the offending field, such as
	// "spec.strategy.canary.steps[1].replicas".
	Field string
	// Detail says what is wrong and how to fix it.
	Detail string
}

// Error returns "<field>: <detail>".
func (e *SpecError) Error() string { return e.Field + ": " + e.Detail }

// Unwrap returns ErrInvalidSpec, so that errors.Is(err, ErrInvalidSpec)
// holds.
func (e *SpecError) Unwrap() error { return ErrInvalidSpec }

// specErrorf returns a *SpecError for field.
func specErrorf(field, format string, args ...any) error {
	return &SpecError{Field: field, Detail: fmt.Sprintf(format, args...)}
}
