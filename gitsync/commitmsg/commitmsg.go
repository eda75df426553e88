// Package commitmsg executes the status commit message templates of
// gitsync: Go text/template syntax and semantics, parsed by
// text/template/parse, without calling methods of the data by name.
//
// text/template looks methods up by name at run time
// (reflect.Value.MethodByName), and a binary that links such a lookup
// keeps every exported method of every type it converts to an interface:
// the linker cannot tell which ones a template might call. For rollgate's
// controller that was 13 MB of code and tables nobody calls, most of it
// paged in at start (docs/benchmarks-history.md, P5, runs A to J). The
// data of a commit message (gitsync.CommitData) is plain fields, so the
// templates lose nothing but method calls; the methods of time.Time that
// format a time (Format, UTC, Unix, IsZero, String) are kept, dispatched
// by a type switch.
package commitmsg

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"text/template/parse"
)

// maxDepth bounds nested {{template}} calls.
const maxDepth = 1000

// Template is a parsed message template.
type Template struct {
	name  string
	trees map[string]*parse.Tree
}

// Parse parses text as a Go text/template named name, with the functions
// text/template predefines.
func Parse(name, text string) (*Template, error) {
	funcs := map[string]any{}
	for n := range builtins {
		funcs[n] = true
	}
	for _, n := range []string{"and", "or"} {
		funcs[n] = true
	}
	trees, err := parse.Parse(name, text, "", "", funcs)
	if err != nil {
		return nil, err
	}
	return &Template{name: name, trees: trees}, nil
}

// Execute writes the template applied to data to w. A missing map key is
// an error, as text/template's missingkey=error option makes it.
func (t *Template) Execute(w io.Writer, data any) (err error) {
	tree := t.trees[t.name]
	if tree == nil || tree.Root == nil {
		return fmt.Errorf("template: %q is an incomplete or empty template", t.name)
	}
	s := &state{t: t, tree: tree, w: w, vars: []variable{{"$", reflect.ValueOf(data)}}}
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(execError)
			if !ok {
				panic(r)
			}
			err = e.err
		}
	}()
	s.walk(reflect.ValueOf(data), tree.Root)
	return nil
}

// execError carries an execution error up through the walk.
type execError struct{ err error }

type variable struct {
	name  string
	value reflect.Value
}

// state is one execution: the tree being run, for error positions, and
// the variables in scope.
type state struct {
	t     *Template
	tree  *parse.Tree
	w     io.Writer
	node  parse.Node
	vars  []variable
	depth int
}

var (
	errBreak    = errors.New("break")
	errContinue = errors.New("continue")
	missing     = reflect.ValueOf(missingValue{})
)

// missingValue marks "no final (piped) value".
type missingValue struct{}

func isMissing(v reflect.Value) bool { return v.IsValid() && v.Type() == missing.Type() }

func (s *state) errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if s.node == nil {
		panic(execError{fmt.Errorf("template: %s: %s", s.tree.Name, msg)})
	}
	location, context := s.tree.ErrorContext(s.node)
	panic(execError{fmt.Errorf("template: %s: executing %q at <%s>: %s", location, s.tree.Name, context, msg)})
}

func (s *state) at(n parse.Node) { s.node = n }

func (s *state) mark() int { return len(s.vars) }

func (s *state) pop(mark int) { s.vars = s.vars[:mark] }

func (s *state) push(name string, v reflect.Value) { s.vars = append(s.vars, variable{name, v}) }

func (s *state) setVar(name string, v reflect.Value) {
	for i := s.mark() - 1; i >= 0; i-- {
		if s.vars[i].name == name {
			s.vars[i].value = v
			return
		}
	}
	s.errorf("undefined variable: %s", name)
}

func (s *state) setTopVar(n int, v reflect.Value) { s.vars[len(s.vars)-n].value = v }

func (s *state) varValue(name string) reflect.Value {
	for i := s.mark() - 1; i >= 0; i-- {
		if s.vars[i].name == name {
			return s.vars[i].value
		}
	}
	s.errorf("undefined variable: %s", name)
	return reflect.Value{}
}

// walk runs node with dot; it returns errBreak or errContinue inside a
// range.
func (s *state) walk(dot reflect.Value, node parse.Node) error {
	s.at(node)
	switch n := node.(type) {
	case *parse.ActionNode:
		v := s.evalPipeline(dot, n.Pipe)
		if len(n.Pipe.Decl) == 0 {
			s.printValue(n, v)
		}
	case *parse.BreakNode:
		return errBreak
	case *parse.ContinueNode:
		return errContinue
	case *parse.CommentNode:
	case *parse.IfNode:
		return s.walkIfOrWith(parse.NodeIf, dot, n.Pipe, n.List, n.ElseList)
	case *parse.ListNode:
		for _, c := range n.Nodes {
			if err := s.walk(dot, c); err != nil {
				return err
			}
		}
	case *parse.RangeNode:
		return s.walkRange(dot, n)
	case *parse.TemplateNode:
		s.walkTemplate(dot, n)
	case *parse.TextNode:
		if _, err := s.w.Write(n.Text); err != nil {
			panic(execError{err})
		}
	case *parse.WithNode:
		return s.walkIfOrWith(parse.NodeWith, dot, n.Pipe, n.List, n.ElseList)
	default:
		s.errorf("unknown node: %s", node)
	}
	return nil
}

func (s *state) walkIfOrWith(typ parse.NodeType, dot reflect.Value, pipe *parse.PipeNode, list, elseList *parse.ListNode) error {
	defer s.pop(s.mark())
	val := s.evalPipeline(dot, pipe)
	if truth(indirectInterface(val)) {
		if typ == parse.NodeWith {
			return s.walk(val, list)
		}
		return s.walk(dot, list)
	}
	if elseList != nil {
		return s.walk(dot, elseList)
	}
	return nil
}

func (s *state) walkRange(dot reflect.Value, r *parse.RangeNode) error {
	s.at(r)
	defer s.pop(s.mark())
	val, _ := indirect(s.evalPipeline(dot, r.Pipe))
	mark := s.mark()
	one := func(index, elem reflect.Value) (stop bool, err error) {
		if len(r.Pipe.Decl) > 0 {
			if r.Pipe.IsAssign {
				if len(r.Pipe.Decl) > 1 {
					s.setVar(r.Pipe.Decl[0].Ident[0], index)
					s.setVar(r.Pipe.Decl[1].Ident[0], elem)
				} else {
					s.setVar(r.Pipe.Decl[0].Ident[0], elem)
				}
			} else {
				s.setTopVar(1, elem)
				if len(r.Pipe.Decl) > 1 {
					s.setTopVar(2, index)
				}
			}
		}
		defer s.pop(mark)
		switch err := s.walk(elem, r.List); err {
		case errBreak:
			return true, nil
		case errContinue, nil:
			return false, nil
		default:
			return true, err
		}
	}
	n := 0
	switch val.Kind() {
	case reflect.Array, reflect.Slice:
		for i := range val.Len() {
			n++
			if stop, err := one(reflect.ValueOf(i), val.Index(i)); stop {
				return err
			}
		}
	case reflect.Map:
		for _, k := range sortedKeys(val) {
			n++
			if stop, err := one(k, val.MapIndex(k)); stop {
				return err
			}
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if len(r.Pipe.Decl) > 1 {
			s.errorf("can't use %v to iterate over more than one variable", val)
		}
		for i := range int(toInt64(val)) {
			n++
			v := reflect.ValueOf(i).Convert(val.Type())
			if stop, err := one(v, v); stop {
				return err
			}
		}
	case reflect.Invalid:
	default:
		s.errorf("range can't iterate over %v", val)
	}
	if n == 0 && r.ElseList != nil {
		return s.walk(dot, r.ElseList)
	}
	return nil
}

func (s *state) walkTemplate(dot reflect.Value, t *parse.TemplateNode) {
	s.at(t)
	tree := s.t.trees[t.Name]
	if tree == nil {
		s.errorf("template %q not defined", t.Name)
	}
	if s.depth >= maxDepth {
		s.errorf("exceeded maximum template depth (%v)", maxDepth)
	}
	dot = s.evalPipeline(dot, t.Pipe)
	ns := &state{t: s.t, tree: tree, w: s.w, vars: []variable{{"$", dot}}, depth: s.depth + 1}
	ns.walk(dot, tree.Root)
}

func (s *state) evalPipeline(dot reflect.Value, pipe *parse.PipeNode) reflect.Value {
	if pipe == nil {
		return reflect.Value{}
	}
	s.at(pipe)
	value := missing
	for _, cmd := range pipe.Cmds {
		value = s.evalCommand(dot, cmd, value)
		if value.Kind() == reflect.Interface && value.Type().NumMethod() == 0 {
			value = reflect.ValueOf(value.Interface())
		}
	}
	for _, v := range pipe.Decl {
		if pipe.IsAssign {
			s.setVar(v.Ident[0], value)
		} else {
			s.push(v.Ident[0], value)
		}
	}
	return value
}

func (s *state) notAFunction(args []parse.Node, final reflect.Value) {
	if len(args) > 1 || !isMissing(final) {
		s.errorf("can't give argument to non-function %s", args[0])
	}
}

func (s *state) evalCommand(dot reflect.Value, cmd *parse.CommandNode, final reflect.Value) reflect.Value {
	first := cmd.Args[0]
	switch n := first.(type) {
	case *parse.FieldNode:
		return s.evalFieldChain(dot, dot, n, n.Ident, cmd.Args, final)
	case *parse.ChainNode:
		return s.evalChainNode(dot, n, cmd.Args, final)
	case *parse.IdentifierNode:
		return s.evalFunction(dot, n, cmd, cmd.Args, final)
	case *parse.PipeNode:
		s.notAFunction(cmd.Args, final)
		return s.evalPipeline(dot, n)
	case *parse.VariableNode:
		return s.evalVariableNode(dot, n, cmd.Args, final)
	}
	s.at(first)
	s.notAFunction(cmd.Args, final)
	if v, ok := s.literal(first); ok {
		return v
	}
	switch first.(type) {
	case *parse.DotNode:
		return dot
	case *parse.NilNode:
		s.errorf("nil is not a command")
	}
	s.errorf("can't evaluate command %q", first)
	return reflect.Value{}
}

// literal is the value of a bool, number or string constant.
func (s *state) literal(n parse.Node) (reflect.Value, bool) {
	switch n := n.(type) {
	case *parse.BoolNode:
		return reflect.ValueOf(n.True), true
	case *parse.NumberNode:
		return s.idealConstant(n), true
	case *parse.StringNode:
		return reflect.ValueOf(n.Text), true
	}
	return reflect.Value{}, false
}

// idealConstant is the value of an untyped number, as text/template gives
// it to a parameter of type any.
func (s *state) idealConstant(c *parse.NumberNode) reflect.Value {
	s.at(c)
	switch {
	case c.IsComplex:
		return reflect.ValueOf(c.Complex128)
	case c.IsFloat && !isHexInt(c.Text) && !isRuneInt(c.Text) && strings.ContainsAny(c.Text, ".eEpP"):
		return reflect.ValueOf(c.Float64)
	case c.IsInt:
		n := int(c.Int64)
		if int64(n) != c.Int64 {
			s.errorf("%s overflows int", c.Text)
		}
		return reflect.ValueOf(n)
	case c.IsUint:
		s.errorf("%s overflows int", c.Text)
	}
	return reflect.Value{}
}

func isRuneInt(s string) bool { return len(s) > 0 && s[0] == '\'' }

func isHexInt(s string) bool {
	return len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && !strings.ContainsAny(s, "pP")
}

func (s *state) evalChainNode(dot reflect.Value, chain *parse.ChainNode, args []parse.Node, final reflect.Value) reflect.Value {
	s.at(chain)
	if len(chain.Field) == 0 {
		s.errorf("internal error: no fields in evalChainNode")
	}
	if chain.Node.Type() == parse.NodeNil {
		s.errorf("indirection through explicit nil in %s", chain)
	}
	pipe := s.evalArg(dot, chain.Node)
	return s.evalFieldChain(dot, pipe, chain, chain.Field, args, final)
}

func (s *state) evalVariableNode(dot reflect.Value, v *parse.VariableNode, args []parse.Node, final reflect.Value) reflect.Value {
	s.at(v)
	value := s.varValue(v.Ident[0])
	if len(v.Ident) == 1 {
		s.notAFunction(args, final)
		return value
	}
	return s.evalFieldChain(dot, value, v, v.Ident[1:], args, final)
}

func (s *state) evalFieldChain(dot, receiver reflect.Value, node parse.Node, ident []string, args []parse.Node, final reflect.Value) reflect.Value {
	n := len(ident)
	for i := range n - 1 {
		receiver = s.evalField(dot, ident[i], node, nil, missing, receiver)
	}
	return s.evalField(dot, ident[n-1], node, args, final, receiver)
}

// evalField is a field of a struct, a key of a map, or one of the time
// methods (see callMethod).
func (s *state) evalField(dot reflect.Value, name string, node parse.Node, args []parse.Node, final, receiver reflect.Value) reflect.Value {
	if !receiver.IsValid() {
		s.errorf("nil data; no entry for key %q", name)
	}
	typ := receiver.Type()
	receiver, isNil := indirect(receiver)
	if receiver.Kind() == reflect.Interface && isNil {
		s.errorf("nil pointer evaluating %s.%s", typ, name)
	}
	if v, ok := s.callMethod(dot, receiver, name, node, args, final); ok {
		return v
	}
	hasArgs := len(args) > 1 || !isMissing(final)
	switch receiver.Kind() {
	case reflect.Struct:
		if f, ok := receiver.Type().FieldByName(name); ok {
			if !f.IsExported() {
				s.errorf("%s is an unexported field of struct type %s", name, typ)
			}
			v, err := receiver.FieldByIndexErr(f.Index)
			if err != nil {
				s.errorf("%v", err)
			}
			if hasArgs {
				s.errorf("%s has arguments but cannot be invoked as function", name)
			}
			return v
		}
	case reflect.Map:
		key := reflect.ValueOf(name)
		if key.Type().AssignableTo(receiver.Type().Key()) {
			if hasArgs {
				s.errorf("%s is not a method but has arguments", name)
			}
			v := receiver.MapIndex(key)
			if !v.IsValid() {
				s.errorf("map has no entry for key %q", name)
			}
			return v
		}
	case reflect.Pointer:
		if et := receiver.Type().Elem(); et.Kind() == reflect.Struct {
			if _, ok := et.FieldByName(name); !ok {
				break
			}
		}
		if isNil {
			s.errorf("nil pointer evaluating %s.%s", typ, name)
		}
	}
	s.errorf("can't evaluate field %s in type %s", name, typ)
	return reflect.Value{}
}

func (s *state) evalFunction(dot reflect.Value, node *parse.IdentifierNode, cmd parse.Node, args []parse.Node, final reflect.Value) reflect.Value {
	s.at(node)
	name := node.Ident
	if name == "and" || name == "or" {
		return s.evalAndOr(dot, name, args[1:], final)
	}
	fn, ok := builtins[name]
	if !ok {
		s.errorf("%q is not a defined function", name)
	}
	vals := s.evalArgs(dot, args[1:], final)
	s.at(node)
	v, err := fn(vals)
	if err != nil {
		s.at(cmd)
		s.errorf("error calling %s: %v", name, err)
	}
	return v
}

// evalAndOr evaluates the arguments of and/or in order and stops at the
// first that decides, as text/template does.
func (s *state) evalAndOr(dot reflect.Value, name string, args []parse.Node, final reflect.Value) reflect.Value {
	n := len(args)
	if !isMissing(final) {
		n++
	}
	if n < 1 {
		s.errorf("wrong number of args for %s: want at least 1 got 0", name)
	}
	var v reflect.Value
	for i := range n {
		if i < len(args) {
			v = s.evalArg(dot, args[i])
		} else {
			v = final
		}
		if t := truth(indirectInterface(v)); (name == "and" && !t) || (name == "or" && t) {
			return v
		}
	}
	return v
}

func (s *state) evalArgs(dot reflect.Value, args []parse.Node, final reflect.Value) []reflect.Value {
	vals := make([]reflect.Value, 0, len(args)+1)
	for _, a := range args {
		vals = append(vals, s.evalArg(dot, a))
	}
	if !isMissing(final) {
		vals = append(vals, final)
	}
	return vals
}

// evalArg is an argument of a function, as text/template evaluates one for
// a parameter of type any.
func (s *state) evalArg(dot reflect.Value, n parse.Node) reflect.Value {
	s.at(n)
	switch arg := n.(type) {
	case *parse.DotNode:
		return dot
	case *parse.NilNode:
		s.errorf("cannot assign nil to interface {}")
	case *parse.FieldNode:
		return s.evalFieldChain(dot, dot, arg, arg.Ident, []parse.Node{n}, missing)
	case *parse.VariableNode:
		return s.evalVariableNode(dot, arg, nil, missing)
	case *parse.PipeNode:
		return s.evalPipeline(dot, arg)
	case *parse.IdentifierNode:
		return s.evalFunction(dot, arg, arg, nil, missing)
	case *parse.ChainNode:
		return s.evalChainNode(dot, arg, nil, missing)
	}
	if v, ok := s.literal(n); ok {
		return v
	}
	s.errorf("can't handle %s for arg of type interface {}", n)
	return reflect.Value{}
}

// printValue writes v as text/template prints an action's value.
func (s *state) printValue(n parse.Node, v reflect.Value) {
	s.at(n)
	iface, ok := printableValue(v)
	if !ok {
		s.errorf("can't print %s of type %s", n, v.Type())
	}
	if _, err := fmt.Fprint(s.w, iface); err != nil {
		panic(execError{err})
	}
}

var (
	errorType       = reflect.TypeFor[error]()
	fmtStringerType = reflect.TypeFor[fmt.Stringer]()
)

func printableValue(v reflect.Value) (any, bool) {
	if v.Kind() == reflect.Pointer {
		v, _ = indirect(v)
	}
	if !v.IsValid() {
		return "<no value>", true
	}
	if !v.Type().Implements(errorType) && !v.Type().Implements(fmtStringerType) {
		if v.CanAddr() && (reflect.PointerTo(v.Type()).Implements(errorType) || reflect.PointerTo(v.Type()).Implements(fmtStringerType)) {
			v = v.Addr()
		} else if k := v.Kind(); k == reflect.Chan || k == reflect.Func {
			return nil, false
		}
	}
	return v.Interface(), true
}

// indirect follows pointers down to a value that is not one, or to a nil
// pointer.
func indirect(v reflect.Value) (rv reflect.Value, isNil bool) {
	for ; v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface; v = v.Elem() {
		if v.IsNil() {
			return v, true
		}
	}
	return v, false
}

func indirectInterface(v reflect.Value) reflect.Value {
	if v.Kind() != reflect.Interface || v.IsNil() {
		return v
	}
	return v.Elem()
}

// truth is text/template's notion of a true value.
func truth(v reflect.Value) bool {
	if !v.IsValid() {
		return false
	}
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() > 0
	case reflect.Bool:
		return v.Bool()
	case reflect.Complex64, reflect.Complex128:
		return v.Complex() != 0
	case reflect.Chan, reflect.Func, reflect.Pointer, reflect.Interface:
		return !v.IsNil()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int() != 0
	case reflect.Float32, reflect.Float64:
		return v.Float() != 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return v.Uint() != 0
	case reflect.Struct:
		return true
	}
	return false
}
