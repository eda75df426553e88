package luascripts

import (
	"errors"
	"testing"
)

func TestIntersect(t *testing.T) {
	ex := func(v string) StringCond { return StringCond{Type: CondExact, Value: v} }
	pre := func(v string) StringCond { return StringCond{Type: CondPrefix, Value: v} }
	re := func(v string) StringCond { return StringCond{Type: CondRegex, Value: v} }
	fold := func(c StringCond) StringCond { c.IgnoreCase = true; return c }
	tests := []struct {
		name       string
		a, b       StringCond
		want       StringCond
		ok, inexpr bool
	}{
		{"same exact", ex("prod"), ex("prod"), ex("prod"), true, false},
		{"different exact", ex("prod"), ex("beta"), StringCond{}, false, false},
		{"exact in prefix", pre("/api"), ex("/api/x"), ex("/api/x"), true, false},
		{"exact outside prefix", pre("/api"), ex("/web"), StringCond{}, false, false},
		{"nested prefixes", pre("/api"), pre("/api/v2"), pre("/api/v2"), true, false},
		{"diverging prefixes", pre("/api"), pre("/web"), StringCond{}, false, false},
		{"exact the expression accepts", re("/api/v[0-9]+/.*"), ex("/api/v2/users"), ex("/api/v2/users"), true, false},
		{"exact the expression refuses", re("/api/v[0-9]+/.*"), ex("/api/users"), StringCond{}, false, false},
		{"expression matches the whole string", re("pro"), ex("prod"), StringCond{}, false, false},
		{"prefix and expression", re("/api/v[0-9]+/.*"), pre("/api/v2"), StringCond{}, false, true},
		{"prefix outside the expression's literal prefix", re("/api/v[0-9]+/.*"), pre("/static"), StringCond{}, false, false},
		{"expression inside a prefix", pre("/api"), re("/api/v[0-9]+"), re("/api/v[0-9]+"), true, false},
		{"two expressions", re("a.*"), re("a[0-9]"), StringCond{}, false, true},
		{"case-insensitive prefix, stricter exact", fold(pre("/docs")), ex("/Docs/x"), ex("/Docs/x"), true, false},
		{"case-insensitive exact, case-sensitive prefix", fold(ex("/DOCS")), pre("/d"), StringCond{}, false, true},
		{"case-insensitive exact, other word", fold(ex("/docs")), ex("/api"), StringCond{}, false, false},
		{"presence and exact", pre(""), ex("x"), ex("x"), true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, err := Intersect(tt.a, tt.b)
			if tt.inexpr {
				if !errors.Is(err, ErrInexpressible) {
					t.Fatalf("got %v %v %v, want ErrInexpressible", got, ok, err)
				}
				return
			}
			if err != nil || ok != tt.ok || got != tt.want {
				t.Fatalf("got %v %v %v, want %v %v", got, ok, err, tt.want, tt.ok)
			}
		})
	}
	if _, _, err := Intersect(re("("), ex("x")); err == nil || errors.Is(err, ErrInexpressible) {
		t.Errorf("an invalid expression must be an error: %v", err)
	}
}
