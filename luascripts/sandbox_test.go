package luascripts

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// runHostile compiles src as script "hostile" and runs it as an Ingress
// script with empty input.
func runHostile(t *testing.T, r Runner, src string) (map[string]string, error) {
	t.Helper()
	s, err := NewScript("hostile", src)
	if err != nil {
		return nil, err
	}
	return r.RunIngress(context.Background(), s, IngressInput{Weight: -1})
}

// TestHostileScripts: every script here must fail with the named kind of
// error and a message saying why, and must not change anything outside
// the sandbox.
func TestHostileScripts(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "pwned")
	tests := []struct {
		name, src string
		kind      error
		msg       string
		line      int
	}{
		{"os.execute", `os.execute("touch ` + marker + `")`, ErrRuntime, "os is not available in the sandbox", 1},
		{"io.open", "\nio.open(\"" + marker + "\", \"w\")", ErrRuntime, "io is not available", 2},
		{"require", `require("os")`, ErrRuntime, "require is not available", 1},
		{"dofile", `dofile("/etc/passwd")`, ErrRuntime, "dofile is not available", 1},
		{"loadfile", `loadfile("/etc/passwd")`, ErrRuntime, "loadfile is not available", 1},
		{"load", `load(function() return nil end)`, ErrRuntime, "load is not available", 1},
		{"loadstring", `loadstring("return 1")()`, ErrRuntime, "loadstring is not available", 1},
		{"package.loadlib", `package.loadlib("libc.so.6", "system")`, ErrRuntime, "package is not available", 1},
		{"debug", `debug.getinfo(1)`, ErrRuntime, "debug is not available", 1},
		{"coroutine", `coroutine.wrap(function() end)()`, ErrRuntime, "coroutine is not available", 1},
		{"collectgarbage", `collectgarbage()`, ErrRuntime, "collectgarbage is not available", 1},
		{"setfenv", `setfenv(1, {})`, ErrRuntime, "setfenv is not available", 1},
		{"string.dump", `string.dump(print)`, ErrRuntime, "attempt to call", 1},
		{"math.random", `return {x = tostring(math.random())}`, ErrRuntime, "attempt to call", 1},
		{"infinite loop", "local i = 0\nwhile true do i = i + 1 end", ErrTimeout, "time limit of 1s exceeded", 2},
		{"loop swallowing errors", `while true do pcall(function() while true do end end) end`, ErrTimeout, "time limit", 1},
		{"string.rep bomb", `local s = string.rep("x", 1e10)`, ErrLimit, "string.rep: a result of 10000000000 bytes exceeds the sandbox limit", 1},
		{"string.format bomb", `local s = string.format("%999999s%999999s", "a", "b")`, ErrLimit, "string.format", 1},
		{"gsub bomb", `local s = string.rep("x", 1e6); s = s:gsub(".", s)`, ErrLimit, "string.gsub", 1},
		{"table.concat bomb", "local t = {}\nfor i = 1, 2000 do t[i] = string.rep('x', 1000) end\nreturn {x = table.concat(t)}", ErrLimit, "table.concat", 3},
		{"concatenation bomb", `local s = "x" for i = 1, 40 do s = s .. s end`, ErrLimit, "heap grew", 1},
		{"table growth", `local t = {} for i = 1, 1e9 do t[i] = {i} end`, ErrLimit, "heap grew", 1},
		{"deep recursion", "local function f(n)\n  return 1 + f(n + 1)\nend\nf(1)", ErrLimit, "stack overflow", 2},
		{"pattern bomb", `local s = string.rep("a", 5000) return {x = tostring(s:find(".-.-.-b"))}`, ErrLimit, "string.find: pattern", 1},
		{"non-table result", `return "annotations"`, ErrResult, "expected the annotations table, got string", 0},
		{"nil result", `local x = 1`, ErrResult, "got nil", 0},
		{"function in result", `return {a = print}`, ErrResult, "expected a string, got function", 0},
		{"runtime error line", "local a = {}\n\nlocal b = a.b.c", ErrRuntime, "attempt to index", 3},
		{"error() line", "\n\n\n\nerror(\"boom\")", ErrRuntime, "boom", 5},
		{"syntax error line", "return {\n  a = 1\n  b = 2\n}", ErrCompile, "near", 3},
	}
	// Every script runs on a fresh state and on a pooled state that an
	// ordinary script used just before: the limits hold for both.
	pool := NewPool(1)
	for _, tt := range tests {
		for _, r := range []struct {
			name   string
			runner Runner
		}{{"fresh", Runner{}}, {"pooled", Runner{Pool: pool}}} {
			t.Run(tt.name+"/"+r.name, func(t *testing.T) {
				if r.runner.Pool != nil {
					warm(t, pool)
				}
				hostileCase(t, r.runner, tt.src, tt.kind, tt.msg, tt.line)
			})
		}
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("a hostile script created %s", marker)
	}
}

// warm runs an ordinary script through pool and checks the next run will
// take a state from it.
func warm(t *testing.T, pool *Pool) {
	t.Helper()
	before := pool.Stats().Reused
	for i := 0; i < 2; i++ {
		if out, err := runHostile(t, Runner{Pool: pool}, `return {ok = "1"}`); err != nil || out["ok"] != "1" {
			t.Fatalf("ordinary script: %v %v", out, err)
		}
	}
	if pool.Stats().Reused <= before {
		t.Fatalf("the pool reused no state: %+v", pool.Stats())
	}
}

// hostileCase runs one hostile script and checks its error.
func hostileCase(t *testing.T, r Runner, src string, kind error, msg string, line int) {
	t.Helper()
	start := time.Now()
	out, err := runHostile(t, r, src)
	elapsed := time.Since(start)
	if err == nil {
		t.Fatalf("no error; result %v", out)
	}
	var se *ScriptError
	if !errors.As(err, &se) {
		t.Fatalf("error %v is a %T, not a *ScriptError", err, err)
	}
	if kind == ErrLimit && msg == "heap grew" && errors.Is(err, ErrTimeout) {
		// The heap limit is a sample of the process' heap: on a starved
		// machine the time limit can stop a growing script first. Either
		// way the sandbox stopped it.
		t.Logf("stopped by the time limit before the heap sample (%v, %v)", elapsed, err)
		return
	}
	if !errors.Is(err, kind) {
		t.Errorf("error kind: got %v, want %v (%v)", se.Kind, kind, err)
	}
	if !strings.Contains(err.Error(), msg) {
		t.Errorf("error %q does not contain %q", err, msg)
	}
	if !strings.HasPrefix(err.Error(), `lua script "hostile": `) {
		t.Errorf("error %q does not name the script", err)
	}
	if line > 0 && se.Line != line {
		t.Errorf("line: got %d, want %d (%v)", se.Line, line, err)
	}
	// Not a timing check (make bench measures speed): a script the limits
	// did not stop would run far past this.
	if elapsed > 10*time.Second {
		t.Errorf("took %v; the limits did not stop the script", elapsed)
	}
}

// TestStoppedRunLeavesNothingRunning: a library call that outlasts the
// time limit (a pattern match allowed by a huge PatternSteps) is not
// abandoned: the run stops at the next instruction and, once the caller
// has its ErrTimeout, nothing of it still runs. (An abandoned call went on
// using CPU and allocating, and the process-wide heap sample then blamed
// whichever script ran next.)
func TestStoppedRunLeavesNothingRunning(t *testing.T) {
	r := Runner{Limits: Limits{Time: 50 * time.Millisecond, PatternSteps: 1e18}}
	_, err := runHostile(t, r, `local s = string.rep("a", 600) local x = s:find(".-.-b") while true do end`)
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "time limit of 50ms exceeded") {
		t.Fatalf("got %v, want the time limit", err)
	}
	buf := make([]byte, 1<<20)
	if stacks := string(buf[:runtime.Stack(buf, true)]); strings.Contains(stacks, "gopher-lua/pm.") {
		t.Fatalf("the pattern match still runs after the run returned:\n%s", stacks)
	}
}

// TestGarbageIsNotHeapGrowth: a loop that only makes garbage (every Lua
// number it computes is a Go allocation) is stopped by the time limit,
// not blamed for heap growth, even when the GC lets garbage pile up far
// beyond the limit (its goal is high after a large heap). The heap
// sample once counted that garbage: an endless loop was reported as
// "heap grew" after the bombs of TestHostileScripts under -count=3.
func TestGarbageIsNotHeapGrowth(t *testing.T) {
	raiseGCGoal(256 << 20)
	r := Runner{Limits: Limits{Time: 300 * time.Millisecond, HeapGrowthBytes: 8 << 20}}
	_, err := runHostile(t, r, "local i = 0\nwhile true do i = i + 1 end")
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v, want the time limit", err)
	}
}

// TestKeptMemoryIsHeapGrowth: memory a run keeps is what the heap limit
// counts (the time limit here is far away, so only the heap limit can
// stop the script).
func TestKeptMemoryIsHeapGrowth(t *testing.T) {
	runtime.GC()
	r := Runner{Limits: Limits{Time: time.Minute, HeapGrowthBytes: 32 << 20}}
	_, err := runHostile(t, r, `local t = {} for i = 1, 1e9 do t[i] = {i} end`)
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "heap grew by more than 33554432 bytes") {
		t.Fatalf("got %v, want the heap limit", err)
	}
}

// raiseGCGoal makes the GC finish a cycle with n more bytes live, so its
// next goal leaves about n bytes of room; the bytes are garbage on return.
func raiseGCGoal(n int) {
	b := make([]byte, n)
	runtime.GC()
	runtime.KeepAlive(b)
}

// TestBackReferencesCount: a back-reference compares a whole capture at
// every step, so it counts like a repetition (it once let a pattern run
// for seconds under the step limit).
func TestBackReferencesCount(t *testing.T) {
	_, err := runHostile(t, Runner{}, `local s = string.rep("a", 3000) return {x = tostring(s:find("(a*)%1b"))}`)
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "string.find: pattern") {
		t.Fatalf("got %v, want the pattern refused", err)
	}
}

func TestValueStackLimit(t *testing.T) {
	r := Runner{Limits: Limits{RegistrySlots: 4096}}
	_, err := runHostile(t, r, `local t = {} for i = 1, 1e4 do t[i] = i end return {x = select("#", unpack(t))}`)
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "registry overflow") {
		t.Fatalf("got %v, want a registry overflow", err)
	}
}

func TestRunsAreIsolated(t *testing.T) {
	s, err := NewScript("isolated", `
		leaked = (leaked or 0) + 1
		string.upper = function() return "hijacked" end
		return {count = tostring(leaked), up = ("a"):upper()}`)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		out, err := Runner{}.RunIngress(context.Background(), s, IngressInput{})
		if err != nil {
			t.Fatal(err)
		}
		if out["count"] != "1" || out["up"] != "hijacked" {
			t.Fatalf("run %d saw state of an earlier run: %v", i, out)
		}
	}
	out, err := runHostile(t, Runner{}, `return {up = ("a"):upper()}`)
	if err != nil || out["up"] != "A" {
		t.Fatalf("string library changed by another script: %v %v", out, err)
	}
}

func TestPrintIsCaptured(t *testing.T) {
	var buf bytes.Buffer
	_, err := runHostile(t, Runner{Print: &buf}, `print("weight", obj.weight, nil) return {}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); got != "weight\t-1\tnil\n" {
		t.Errorf("print output %q", got)
	}
	buf.Reset()
	_, err = runHostile(t, Runner{Print: &buf, Limits: Limits{MaxStringBytes: 64}},
		`for i = 1, 100 do print("line", i) end return {}`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(buf.String(), "... print output truncated\n") || buf.Len() > 200 {
		t.Errorf("print output not bounded: %q", buf.String())
	}
	if _, err := runHostile(t, Runner{}, `print("discarded") return {}`); err != nil {
		t.Errorf("print without a writer: %v", err)
	}
}

func TestCallerCancellation(t *testing.T) {
	s, err := NewScript("loop", `while true do end`)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = Runner{}.RunIngress(ctx, s, IngressInput{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the caller's deadline", err)
	}
	if time.Since(start) > 500*time.Millisecond {
		t.Errorf("cancellation took %v", time.Since(start))
	}
}

func TestUncompiledScript(t *testing.T) {
	_, err := Runner{}.RunIngress(context.Background(), Script{Name: "empty"}, IngressInput{})
	if !errors.Is(err, ErrCompile) {
		t.Fatalf("got %v", err)
	}
}

func TestPatternCost(t *testing.T) {
	tests := []struct {
		pat  string
		n    int
		want float64
	}{
		{"abc", 9, 10},
		{"%s+", 9, 10},        // a final repetition only scans
		{"a*c", 9, 100},       // a repetition followed by more
		{"^a*c", 9, 10},       // anchored
		{"[*+-]x", 9, 10},     // quantifier characters in a set
		{"%*x", 9, 10},        // escaped
		{".-.-b", 9, 1000},    // nested
		{"%b()x", 9, 100},     // balanced match
		{"a?b?c", 9, 40},      // optional items
		{"(.-)%s*$", 9, 1000}, // captures do not hide repetitions
		{"x(a*)", 9, 10},      // final repetition inside a capture
		{"[%]]*y", 9, 100},    // escaped ] inside a set
		{strings.Repeat("a*", 40), 99, 1e8 * 100},
	}
	for _, tt := range tests {
		got := patternCost(tt.pat, tt.n, 1e8)
		if tt.want >= 1e8 {
			if got <= 1e8 {
				t.Errorf("patternCost(%q, %d) = %g, want over the limit", tt.pat, tt.n, got)
			}
			continue
		}
		if got != tt.want {
			t.Errorf("patternCost(%q, %d) = %g, want %g", tt.pat, tt.n, got, tt.want)
		}
	}
}

func TestLegitStringFunctionsStillWork(t *testing.T) {
	out, err := runHostile(t, Runner{}, `
		local s = "  X-Canary  "
		local trimmed = s:match("^%s*(.-)%s*$")
		local parts = {}
		for p in ("a,b,c"):gmatch("[^,]+") do table.insert(parts, p) end
		return {
			trimmed = trimmed,
			joined = table.concat(parts, "|"),
			fmt = string.format("%s=%d%%", "w", 5),
			rep = string.rep("ab", 3, nil),
			gsub = (("a-b-c"):gsub("-", function(x) return "+" end)),
			gsubt = (("$x and $y"):gsub("%$(%w+)", {x = "1", y = "2"})),
			plain = tostring(("a.b"):find(".", 1, true)),
		}`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"trimmed": "X-Canary", "joined": "a|b|c", "fmt": "w=5%", "rep": "ababab",
		"gsub": "a+b+c", "gsubt": "1 and 2", "plain": "2",
	}
	for k, v := range want {
		if out[k] != v {
			t.Errorf("%s: got %q, want %q", k, out[k], v)
		}
	}
}
