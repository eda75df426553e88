package luascripts

import (
	"fmt"
	"regexp"
	"strings"
)

// StringCond is one condition on a string (a path, a header value, a query
// parameter): the algebra that both the match scripts (through
// rollgate.covers and rollgate.intersect) and the routing guard use to
// reason about (route match) AND (step match).
//
// Regular expressions are RE2 and must match the whole string, as in Envoy
// (Istio, Contour) and the Gateway API's common implementations. Prefix is
// a plain string prefix. IgnoreCase applies to Exact and Prefix only (as
// Istio's ignoreUriCase).
type StringCond struct {
	// Type is Exact, Prefix or RegularExpression.
	Type string
	// Value is the string, the prefix or the expression.
	Value string
	// IgnoreCase compares Exact and Prefix without regard to case.
	IgnoreCase bool
}

// Condition types of StringCond.
const (
	CondExact  = "Exact"
	CondPrefix = "Prefix"
	CondRegex  = "RegularExpression"
)

func (c StringCond) String() string {
	s := fmt.Sprintf("%s %q", c.Type, c.Value)
	if c.IgnoreCase {
		s += " (ignoring case)"
	}
	return s
}

func (c StringCond) check() error {
	switch c.Type {
	case CondExact, CondPrefix:
		return nil
	case CondRegex:
		_, err := fullRegex(c.Value)
		return err
	}
	return fmt.Errorf("unknown condition type %q (Exact, Prefix or RegularExpression)", c.Type)
}

// fullRegex compiles an RE2 expression that must match the whole string.
func fullRegex(expr string) (*regexp.Regexp, error) {
	re, err := regexp.Compile("^(?:" + expr + ")$")
	if err != nil {
		return nil, fmt.Errorf("invalid regular expression %q: %v", expr, err)
	}
	return re, nil
}

// literalPrefix is a prefix every string matching the expression starts
// with ("" when none is known).
func literalPrefix(expr string) string {
	re, err := regexp.Compile(expr)
	if err != nil {
		return ""
	}
	p, _ := re.LiteralPrefix()
	return p
}

func fold(c StringCond, s string) string {
	if c.IgnoreCase {
		return strings.ToLower(s)
	}
	return s
}

// Matches reports whether s satisfies c.
func (c StringCond) Matches(s string) (bool, error) {
	switch c.Type {
	case CondExact:
		return fold(c, s) == fold(c, c.Value), nil
	case CondPrefix:
		return strings.HasPrefix(fold(c, s), fold(c, c.Value)), nil
	case CondRegex:
		re, err := fullRegex(c.Value)
		if err != nil {
			return false, err
		}
		return re.MatchString(s), nil
	}
	return false, c.check()
}

// Covers reports whether every string that satisfies b also satisfies a
// (b is as strict as a, or stricter). It answers false when it cannot
// tell, so a true answer is always right.
func Covers(a, b StringCond) (bool, error) {
	if err := a.check(); err != nil {
		return false, err
	}
	if err := b.check(); err != nil {
		return false, err
	}
	if b.IgnoreCase && !a.IgnoreCase && b.Type != CondRegex {
		// b admits every casing of its value; a only some, unless the
		// value has no letters.
		if strings.ToLower(b.Value) != strings.ToUpper(b.Value) {
			return false, nil
		}
		b.IgnoreCase = false
	}
	switch b.Type {
	case CondExact:
		return a.Matches(b.Value)
	case CondPrefix:
		switch a.Type {
		case CondPrefix:
			return strings.HasPrefix(fold(a, b.Value), fold(a, a.Value)), nil
		case CondRegex:
			return a.Value == ".*" || a.Value == "(.*)", nil
		}
		return false, nil
	case CondRegex:
		switch a.Type {
		case CondRegex:
			return a.Value == b.Value || a.Value == ".*", nil
		case CondPrefix:
			return strings.HasPrefix(fold(a, literalPrefix(b.Value)), fold(a, a.Value)), nil
		}
	}
	return false, nil
}

// Disjoint reports whether no string can satisfy both a and b. It answers
// false when it cannot tell.
func Disjoint(a, b StringCond) (bool, error) {
	if err := a.check(); err != nil {
		return false, err
	}
	if err := b.check(); err != nil {
		return false, err
	}
	if a.Type == CondExact {
		ok, err := b.Matches(a.Value)
		if a.IgnoreCase && !ok && err == nil {
			// Another casing of a's value might satisfy b: decide
			// case-insensitively where b allows it, else do not know.
			if b.Type == CondRegex {
				return false, nil
			}
			la, lb := strings.ToLower(a.Value), strings.ToLower(b.Value)
			ok = la == lb || (b.Type == CondPrefix && strings.HasPrefix(la, lb))
		}
		return !ok, err
	}
	if b.Type == CondExact {
		return Disjoint(b, a)
	}
	pa, pb := a.Value, b.Value
	if a.Type == CondRegex {
		pa = literalPrefix(a.Value)
	}
	if b.Type == CondRegex {
		pb = literalPrefix(b.Value)
	}
	if a.IgnoreCase || b.IgnoreCase {
		pa, pb = strings.ToLower(pa), strings.ToLower(pb)
	}
	// Two prefixes (literal or of an expression) that diverge.
	return !strings.HasPrefix(pa, pb) && !strings.HasPrefix(pb, pa), nil
}

// ErrInexpressible is wrapped by Intersect when (a AND b) is not a single
// condition of the three types.
var ErrInexpressible = fmt.Errorf("cannot be expressed as one condition")

// Intersect returns the single condition equal to (a AND b). ok is false
// when no string satisfies both. The error wraps ErrInexpressible when the
// conjunction is neither empty nor one condition.
func Intersect(a, b StringCond) (c StringCond, ok bool, err error) {
	if in, err := Covers(a, b); err != nil || in {
		return b, err == nil, err
	}
	if in, err := Covers(b, a); err != nil || in {
		return a, err == nil, err
	}
	if none, err := Disjoint(a, b); err != nil || none {
		return StringCond{}, false, err
	}
	return StringCond{}, false, fmt.Errorf("(%s) AND (%s) %w", a, b, ErrInexpressible)
}
