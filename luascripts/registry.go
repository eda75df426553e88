package luascripts

import (
	"crypto/sha256"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"
	"sync"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// builtins holds the built-in scripts:
//
//	trafficrouting/<group>/<Kind>.lua        custom resources
//	trafficrouting_ingress/<classType>.lua   Ingress annotation dialects
//
//go:embed trafficrouting trafficrouting_ingress
var builtins embed.FS

// KeyPrefix starts every script key of the controller's ConfigMap.
const KeyPrefix = "lua.traffic.routing."

// MaxScriptBytes is the largest script source accepted.
const MaxScriptBytes = 128 << 10

// CustomKey is the ConfigMap key of the script for a custom resource, such
// as lua.traffic.routing.VirtualService.networking.istio.io.
func CustomKey(kind, group string) string {
	return KeyPrefix + kind + "." + group
}

// IngressKey is the ConfigMap key of the script for an Ingress class type,
// such as lua.traffic.routing.ingress.nginx.
func IngressKey(classType string) string {
	return KeyPrefix + "ingress." + classType
}

// Script is a compiled Lua script, ready to run any number of times,
// concurrently. Build one with NewScript or get one from a Library.
type Script struct {
	// Name identifies the script in errors: "built-in <Kind>.<group>" (or
	// "built-in ingress.<class>") for built-ins, the ConfigMap key for
	// overrides.
	Name string
	// Key is the ConfigMap key the script answers to.
	Key string
	// BuiltIn is true for the scripts shipped with rollgate.
	BuiltIn bool

	proto *lua.FunctionProto
	// sum is the SHA-256 of the source (Memo's name for the script).
	sum [32]byte
	// native is the Go implementation of a built-in, or nil (see
	// native.go).
	native nativeFunc
}

// NewScript compiles source. Syntax errors are returned as a *ScriptError
// wrapping ErrCompile, with the line.
func NewScript(name, source string) (Script, error) {
	if len(source) > MaxScriptBytes {
		return Script{}, scriptErr(name, ErrCompile, 0, "script has %d bytes, more than the limit of %d", len(source), MaxScriptBytes)
	}
	chunk, err := parse.Parse(strings.NewReader(source), name)
	if err != nil {
		return Script{}, compileError(name, err)
	}
	proto, err := lua.Compile(chunk, name)
	if err != nil {
		return Script{}, compileError(name, err)
	}
	return Script{Name: name, proto: proto, sum: sha256.Sum256([]byte(source))}, nil
}

// Library resolves which script handles a resource: a ConfigMap override,
// else a built-in. It compiles each script once and caches it; it is safe
// for concurrent use. The zero value is not usable: call NewLibrary.
type Library struct {
	fsys fs.FS

	mu       sync.Mutex
	builtin  map[string]Script
	override map[string]overrideEntry
	pool     *Pool
	memo     *Memo
}

type overrideEntry struct {
	sum    [32]byte
	script Script
	err    error
}

// NewLibrary returns a Library of the embedded built-in scripts.
func NewLibrary() *Library {
	return newLibrary(builtins)
}

func newLibrary(fsys fs.FS) *Library {
	return &Library{fsys: fsys, builtin: map[string]Script{}, override: map[string]overrideEntry{}, pool: NewPool(libraryPoolSize), memo: NewMemo()}
}

// libraryPoolSize is how many idle Lua states a Library keeps.
const libraryPoolSize = 8

// Pool returns the Library's pool of Lua states, for Runner.Pool: the
// scripts of one Library share it.
func (l *Library) Pool() *Pool {
	return l.pool
}

// Memo returns the Library's memo of Ingress script results, for
// Runner.Memo: the scripts of one Library share it.
func (l *Library) Memo() *Memo {
	return l.memo
}

var (
	kindRE  = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*$`)
	groupRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)
	classRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
)

// Resolve returns the script for a custom resource of the given kind and
// API group. overrides is the data of the controller's ConfigMap. The one
// precedence rule: the key lua.traffic.routing.<Kind>.<group> in overrides
// always wins over the built-in script; without either, the error wraps
// ErrNoScript and names the key to add.
func (l *Library) Resolve(kind, group string, overrides map[string]string) (Script, error) {
	key := CustomKey(kind, group)
	if src, ok := overrides[key]; ok {
		return l.compileOverride(key, src)
	}
	if !kindRE.MatchString(kind) || !groupRE.MatchString(group) {
		return Script{}, noScript(key, kind+"."+group)
	}
	return l.loadBuiltin(key, path.Join("trafficrouting", group, kind+".lua"), kind+"."+group)
}

// ResolveIngress returns the script for an Ingress class type (nginx when
// empty), with the same precedence as Resolve: the ConfigMap key
// lua.traffic.routing.ingress.<classType> always wins over the built-in.
func (l *Library) ResolveIngress(classType string, overrides map[string]string) (Script, error) {
	if classType == "" {
		classType = "nginx"
	}
	key := IngressKey(classType)
	if src, ok := overrides[key]; ok {
		return l.compileOverride(key, src)
	}
	if !classRE.MatchString(classType) {
		return Script{}, noScript(key, "ingress class type "+classType)
	}
	return l.loadBuiltin(key, path.Join("trafficrouting_ingress", classType+".lua"), "ingress."+classType)
}

func noScript(key, what string) error {
	return fmt.Errorf("%w for %s: add the key %q with a script to the controller's ConfigMap", ErrNoScript, what, key)
}

func (l *Library) loadBuiltin(key, file, what string) (Script, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s, ok := l.builtin[key]; ok {
		return s, nil
	}
	src, err := fs.ReadFile(l.fsys, file)
	if err != nil {
		return Script{}, noScript(key, what)
	}
	s, err := NewScript("built-in "+what, string(src))
	if err != nil {
		return Script{}, err
	}
	s.Key, s.BuiltIn, s.native = key, true, nativeFor(key)
	l.builtin[key] = s
	return s, nil
}

// compileOverride compiles a ConfigMap script, reusing the last compilation
// of the same key while its source is unchanged.
func (l *Library) compileOverride(key, src string) (Script, error) {
	sum := sha256.Sum256([]byte(src))
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.override[key]; ok && e.sum == sum {
		return e.script, e.err
	}
	s, err := NewScript(key, src)
	s.Key = key
	l.override[key] = overrideEntry{sum: sum, script: s, err: err}
	return s, err
}

// Check compiles every script key of a ConfigMap's data and returns the
// syntax errors joined, or nil. Keys without the prefix are ignored.
func (l *Library) Check(overrides map[string]string) error {
	var errs []error
	for _, key := range sortedKeys(overrides) {
		if !strings.HasPrefix(key, KeyPrefix) {
			continue
		}
		if _, err := l.compileOverride(key, overrides[key]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// BuiltinKeys lists the ConfigMap keys that have a built-in script, sorted.
func (l *Library) BuiltinKeys() []string {
	var keys []string
	_ = fs.WalkDir(l.fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".lua") {
			return nil
		}
		dir, file := path.Split(p)
		name := strings.TrimSuffix(file, ".lua")
		switch parts := strings.Split(strings.TrimSuffix(dir, "/"), "/"); {
		case len(parts) == 1 && parts[0] == "trafficrouting_ingress":
			keys = append(keys, IngressKey(name))
		case len(parts) == 2 && parts[0] == "trafficrouting":
			keys = append(keys, CustomKey(name, parts[1]))
		}
		return nil
	})
	sort.Strings(keys)
	return keys
}
