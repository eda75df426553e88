package commitmsg

import (
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"text/template"
	"time"

	"text/template/parse"
)

// builtins are text/template's predefined functions but and, or (which
// evaluate their arguments lazily, in evalAndOr) and call (the data has no
// functions to call).
var builtins = map[string]func([]reflect.Value) (reflect.Value, error){
	"eq":       eq,
	"ge":       compareFunc("ge", func(c int) bool { return c >= 0 }),
	"gt":       compareFunc("gt", func(c int) bool { return c > 0 }),
	"html":     escaper(template.HTMLEscaper),
	"index":    index,
	"js":       escaper(template.JSEscaper),
	"le":       compareFunc("le", func(c int) bool { return c <= 0 }),
	"len":      length,
	"lt":       compareFunc("lt", func(c int) bool { return c < 0 }),
	"ne":       ne,
	"not":      not,
	"print":    printer(fmt.Sprint),
	"printf":   printf,
	"println":  printer(fmt.Sprintln),
	"slice":    slice,
	"urlquery": escaper(template.URLQueryEscaper),
}

func wantArgs(args []reflect.Value, n int) error {
	if len(args) != n {
		return fmt.Errorf("wrong number of args: want %d got %d", n, len(args))
	}
	return nil
}

func interfaces(args []reflect.Value) []any {
	out := make([]any, len(args))
	for i, a := range args {
		if p, ok := printableValue(a); ok {
			out[i] = p
		} else if a.IsValid() {
			out[i] = a.Interface()
		}
	}
	return out
}

func printer(f func(...any) string) func([]reflect.Value) (reflect.Value, error) {
	return func(args []reflect.Value) (reflect.Value, error) {
		vals := make([]any, len(args))
		for i, a := range args {
			if a.IsValid() {
				vals[i] = a.Interface()
			}
		}
		return reflect.ValueOf(f(vals...)), nil
	}
}

func printf(args []reflect.Value) (reflect.Value, error) {
	if len(args) < 1 {
		return reflect.Value{}, errors.New("wrong number of args: want at least 1 got 0")
	}
	format := indirectInterface(args[0])
	if format.Kind() != reflect.String {
		return reflect.Value{}, fmt.Errorf("wrong type for value; expected string; got %s", typeName(format))
	}
	rest := make([]any, len(args)-1)
	for i, a := range args[1:] {
		if a.IsValid() {
			rest[i] = a.Interface()
		}
	}
	return reflect.ValueOf(fmt.Sprintf(format.String(), rest...)), nil
}

func escaper(f func(...any) string) func([]reflect.Value) (reflect.Value, error) {
	return func(args []reflect.Value) (reflect.Value, error) {
		return reflect.ValueOf(f(interfaces(args)...)), nil
	}
}

func typeName(v reflect.Value) string {
	if !v.IsValid() {
		return "<nil>"
	}
	return v.Type().String()
}

func not(args []reflect.Value) (reflect.Value, error) {
	if err := wantArgs(args, 1); err != nil {
		return reflect.Value{}, err
	}
	return reflect.ValueOf(!truth(indirectInterface(args[0]))), nil
}

func length(args []reflect.Value) (reflect.Value, error) {
	if err := wantArgs(args, 1); err != nil {
		return reflect.Value{}, err
	}
	item, isNil := indirect(args[0])
	if isNil {
		return reflect.Value{}, errors.New("len of nil pointer")
	}
	switch item.Kind() {
	case reflect.Array, reflect.Chan, reflect.Map, reflect.Slice, reflect.String:
		return reflect.ValueOf(item.Len()), nil
	}
	return reflect.Value{}, fmt.Errorf("len of type %s", typeName(item))
}

func indexArg(v reflect.Value, cap int) (int, error) {
	v = indirectInterface(v)
	var x int64
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		x = v.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		x = int64(v.Uint())
	case reflect.Invalid:
		return 0, errors.New("cannot index slice/array with nil")
	default:
		return 0, fmt.Errorf("cannot index slice/array with type %s", v.Type())
	}
	if x < 0 || int(x) < 0 || int(x) > cap {
		return 0, fmt.Errorf("index out of range: %d", x)
	}
	return int(x), nil
}

// itemArg is the first argument of index or slice, the item to index.
func itemArg(args []reflect.Value, fn string) (reflect.Value, error) {
	if len(args) < 1 {
		return reflect.Value{}, errors.New("wrong number of args: want at least 1 got 0")
	}
	item := indirectInterface(args[0])
	if !item.IsValid() {
		return reflect.Value{}, fmt.Errorf("%s of untyped nil", fn)
	}
	return item, nil
}

func index(args []reflect.Value) (reflect.Value, error) {
	item, err := itemArg(args, "index")
	if err != nil {
		return reflect.Value{}, err
	}
	for _, ix := range args[1:] {
		ix = indirectInterface(ix)
		var isNil bool
		if item, isNil = indirect(item); isNil {
			return reflect.Value{}, errors.New("index of nil pointer")
		}
		switch item.Kind() {
		case reflect.Array, reflect.Slice, reflect.String:
			x, err := indexArg(ix, item.Len())
			if err != nil {
				return reflect.Value{}, err
			}
			if x == item.Len() {
				return reflect.Value{}, fmt.Errorf("index out of range: %d", x)
			}
			item = item.Index(x)
		case reflect.Map:
			if !ix.IsValid() {
				ix = reflect.Zero(item.Type().Key())
			}
			if !ix.Type().AssignableTo(item.Type().Key()) {
				return reflect.Value{}, fmt.Errorf("%s is not index type for %s", ix.Type(), item.Type())
			}
			if x := item.MapIndex(ix); x.IsValid() {
				item = x
			} else {
				item = reflect.Zero(item.Type().Elem())
			}
		case reflect.Invalid:
			panic("unreachable")
		default:
			return reflect.Value{}, fmt.Errorf("can't index item of type %s", item.Type())
		}
	}
	return item, nil
}

func slice(args []reflect.Value) (reflect.Value, error) {
	item, err := itemArg(args, "slice")
	if err != nil {
		return reflect.Value{}, err
	}
	idx := args[1:]
	if len(idx) > 3 {
		return reflect.Value{}, fmt.Errorf("too many slice indexes: %d", len(idx))
	}
	var c int
	switch item.Kind() {
	case reflect.String:
		if len(idx) == 3 {
			return reflect.Value{}, errors.New("cannot 3-index slice a string")
		}
		c = item.Len()
	case reflect.Array, reflect.Slice:
		c = item.Cap()
	default:
		return reflect.Value{}, fmt.Errorf("can't slice item of type %s", item.Type())
	}
	ix := [3]int{0, item.Len()}
	for i, a := range idx {
		x, err := indexArg(a, c)
		if err != nil {
			return reflect.Value{}, err
		}
		ix[i] = x
	}
	if ix[0] > ix[1] {
		return reflect.Value{}, fmt.Errorf("invalid slice index: %d > %d", ix[0], ix[1])
	}
	if len(idx) < 3 {
		return item.Slice(ix[0], ix[1]), nil
	}
	if ix[1] > ix[2] {
		return reflect.Value{}, fmt.Errorf("invalid slice index: %d > %d", ix[1], ix[2])
	}
	return item.Slice3(ix[0], ix[1], ix[2]), nil
}

// basic kinds of comparable values, as text/template groups them.
type kind int

const (
	invalidKind kind = iota
	boolKind
	complexKind
	intKind
	floatKind
	stringKind
	uintKind
)

var (
	errBadComparisonType = errors.New("invalid type for comparison")
	errBadComparison     = errors.New("incompatible types for comparison")
	errNoComparison      = errors.New("missing argument for comparison")
)

func basicKind(v reflect.Value) (kind, error) {
	switch v.Kind() {
	case reflect.Bool:
		return boolKind, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return intKind, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return uintKind, nil
	case reflect.Float32, reflect.Float64:
		return floatKind, nil
	case reflect.Complex64, reflect.Complex128:
		return complexKind, nil
	case reflect.String:
		return stringKind, nil
	}
	return invalidKind, errBadComparisonType
}

func isNil(v reflect.Value) bool {
	if !v.IsValid() {
		return true
	}
	switch v.Kind() {
	case reflect.Chan, reflect.Func, reflect.Interface, reflect.Map, reflect.Pointer, reflect.Slice:
		return v.IsNil()
	}
	return false
}

func canCompare(v1, v2 reflect.Value) bool {
	k1, k2 := v1.Kind(), v2.Kind()
	if k1 == reflect.Invalid || k2 == reflect.Invalid || k1 == k2 {
		return true
	}
	switch k1 {
	case reflect.Chan, reflect.Func, reflect.Interface, reflect.Map, reflect.Pointer, reflect.Slice:
		return k2 == reflect.Chan || k2 == reflect.Func || k2 == reflect.Interface || k2 == reflect.Map || k2 == reflect.Pointer || k2 == reflect.Slice
	}
	return false
}

func eq(args []reflect.Value) (reflect.Value, error) {
	if len(args) < 2 {
		return reflect.Value{}, errNoComparison
	}
	ok, err := eqValues(indirectInterface(args[0]), args[1:])
	return reflect.ValueOf(ok), err
}

func eqValues(arg1 reflect.Value, arg2 []reflect.Value) (bool, error) {
	k1, _ := basicKind(arg1)
	for _, arg := range arg2 {
		arg = indirectInterface(arg)
		k2, _ := basicKind(arg)
		truth := false
		if k1 != k2 {
			switch {
			case k1 == intKind && k2 == uintKind:
				truth = arg1.Int() >= 0 && uint64(arg1.Int()) == arg.Uint()
			case k1 == uintKind && k2 == intKind:
				truth = arg.Int() >= 0 && arg1.Uint() == uint64(arg.Int())
			default:
				if arg1.IsValid() && arg.IsValid() {
					return false, errBadComparison
				}
			}
		} else {
			switch k1 {
			case boolKind:
				truth = arg1.Bool() == arg.Bool()
			case complexKind:
				truth = arg1.Complex() == arg.Complex()
			case floatKind:
				truth = arg1.Float() == arg.Float()
			case intKind:
				truth = arg1.Int() == arg.Int()
			case stringKind:
				truth = arg1.String() == arg.String()
			case uintKind:
				truth = arg1.Uint() == arg.Uint()
			default:
				if !canCompare(arg1, arg) {
					return false, fmt.Errorf("non-comparable types %s: %v, %s: %v", typeName(arg1), arg1.Kind(), typeName(arg), arg.Kind())
				}
				if isNil(arg1) || isNil(arg) {
					truth = isNil(arg) == isNil(arg1)
				} else {
					if !arg.Type().Comparable() {
						return false, fmt.Errorf("non-comparable type %s: %v", arg, arg.Type())
					}
					truth = arg1.Interface() == arg.Interface()
				}
			}
		}
		if truth {
			return true, nil
		}
	}
	return false, nil
}

func ne(args []reflect.Value) (reflect.Value, error) {
	if err := wantArgs(args, 2); err != nil {
		return reflect.Value{}, err
	}
	ok, err := eqValues(indirectInterface(args[0]), args[1:])
	return reflect.ValueOf(!ok), err
}

// compareFunc is lt, le, gt or ge: ok says what the sign of arg1 - arg2
// must be.
func compareFunc(name string, ok func(int) bool) func([]reflect.Value) (reflect.Value, error) {
	return func(args []reflect.Value) (reflect.Value, error) {
		if err := wantArgs(args, 2); err != nil {
			return reflect.Value{}, err
		}
		c, err := compare(indirectInterface(args[0]), indirectInterface(args[1]))
		if err != nil {
			return reflect.Value{}, err
		}
		return reflect.ValueOf(ok(c)), nil
	}
}

func compare(a, b reflect.Value) (int, error) {
	k1, err := basicKind(a)
	if err != nil {
		return 0, err
	}
	k2, err := basicKind(b)
	if err != nil {
		return 0, err
	}
	if k1 != k2 {
		switch {
		case k1 == intKind && k2 == uintKind:
			if a.Int() < 0 {
				return -1, nil
			}
			return cmp.Compare(uint64(a.Int()), b.Uint()), nil
		case k1 == uintKind && k2 == intKind:
			if b.Int() < 0 {
				return 1, nil
			}
			return cmp.Compare(a.Uint(), uint64(b.Int())), nil
		}
		return 0, errBadComparison
	}
	switch k1 {
	case boolKind, complexKind:
		return 0, errBadComparisonType
	case floatKind:
		return cmp.Compare(a.Float(), b.Float()), nil
	case intKind:
		return cmp.Compare(a.Int(), b.Int()), nil
	case stringKind:
		return cmp.Compare(a.String(), b.String()), nil
	case uintKind:
		return cmp.Compare(a.Uint(), b.Uint()), nil
	}
	return 0, errBadComparisonType
}

// callMethod calls the methods of time.Time a message may use to format
// a time; ok is false for any other name or receiver.
func (s *state) callMethod(dot, receiver reflect.Value, name string, node parse.Node, args []parse.Node, final reflect.Value) (reflect.Value, bool) {
	if receiver.Type() != reflect.TypeFor[time.Time]() {
		return reflect.Value{}, false
	}
	t := receiver.Interface().(time.Time)
	var vals []reflect.Value
	if len(args) > 1 {
		vals = s.evalArgs(dot, args[1:], final)
	} else if !isMissing(final) {
		vals = []reflect.Value{final}
	}
	s.at(node)
	want := func(n int) {
		if len(vals) != n {
			s.errorf("wrong number of args for %s: want %d got %d", name, n, len(vals))
		}
	}
	switch name {
	case "Format":
		want(1)
		layout := indirectInterface(vals[0])
		if layout.Kind() != reflect.String {
			s.errorf("wrong type for value; expected string; got %s", typeName(layout))
		}
		return reflect.ValueOf(t.Format(layout.String())), true
	case "UTC":
		want(0)
		return reflect.ValueOf(t.UTC()), true
	case "Unix":
		want(0)
		return reflect.ValueOf(t.Unix()), true
	case "IsZero":
		want(0)
		return reflect.ValueOf(t.IsZero()), true
	case "String":
		want(0)
		return reflect.ValueOf(t.String()), true
	}
	s.errorf("can't call method %s of time.Time: a message template can call Format, UTC, Unix, IsZero and String", name)
	return reflect.Value{}, false
}

// sortedKeys are the keys of a map in the order text/template ranges over
// them, for the key kinds it sorts (numbers, strings, bools).
func sortedKeys(m reflect.Value) []reflect.Value {
	keys := m.MapKeys()
	slices.SortStableFunc(keys, func(a, b reflect.Value) int {
		if c, err := compare(a, b); err == nil {
			return c
		}
		if a.Kind() == reflect.Bool {
			return cmp.Compare(boolInt(a.Bool()), boolInt(b.Bool()))
		}
		return 0
	})
	return keys
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func toInt64(v reflect.Value) int64 {
	if v.CanInt() {
		return v.Int()
	}
	return int64(v.Uint())
}
