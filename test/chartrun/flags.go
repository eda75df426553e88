package chartrun

import "strings"

// flagValue is a long flag (name without dashes) and the value to give it.
type flagValue struct {
	name, value string
}

// override returns args with every flag of set given its value: the first
// occurrence of the flag, as --name=value or as --name value, is replaced
// in place by --name=value; later occurrences are dropped (pflag would let
// the last one win); a flag args does not set is appended. Every flag of
// set takes a value, so in the --name value form the next argument is
// the flag's value.
func override(args []string, set []flagValue) []string {
	want := map[string]string{}
	for _, f := range set {
		want[f.name] = f.value
	}
	done := map[string]bool{}
	out := make([]string, 0, len(args)+len(set))
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, _, inline := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		v, ok := want[name]
		if !strings.HasPrefix(a, "--") || !ok {
			out = append(out, a)
			continue
		}
		if !inline {
			i++ // the value is the next argument
		}
		if !done[name] {
			out = append(out, "--"+name+"="+v)
			done[name] = true
		}
	}
	for _, f := range set {
		if !done[f.name] {
			out = append(out, "--"+f.name+"="+f.value)
		}
	}
	return out
}
