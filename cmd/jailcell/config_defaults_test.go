package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/session"
)

// componentDefaults pairs each key whose field has a default in the
// component that owns it with that component's exported default: the
// service's default and a library caller's (a zero field) are then one
// value. field is the key's field of config, as a dotted path.
var componentDefaults = []struct {
	key, field string
	want       any
}{
	{"sessions.idle_ttl", "Session.IdleTTL", session.DefaultIdleTTL},
	{"sessions.max_idle_ttl", "Session.MaxIdleTTL", session.DefaultMaxIdleTTL},
	{"sessions.max_lifetime", "Session.MaxLifetime", session.DefaultMaxLifetime},
	{"sessions.hibernated_ttl", "Session.HibernatedTTL", session.DefaultHibernatedTTL},
	{"sessions.max_hibernated", "Session.MaxHibernated", session.DefaultMaxHibernated},
	{"sandbox.uid_base", "UIDBase", isolate.DefaultUIDBase},
	{"sandbox.claim_dir", "ClaimDir", isolate.DefaultClaimDir},
	{"criu", "Criu", isolate.DefaultCriu},
}

// serviceOwnDefaults are the keys that fill a session.Config field that
// has no default of its own (its zero value is meaningful), with why the
// key's default is what it is.
var serviceOwnDefaults = map[string]string{
	"node.id":                        `"": the service derives it from the host name (checkNodeID)`,
	"state_quota_bytes":              "0: session.Config sizes the quota from the filesystem",
	"store_quota_bytes":              "0: session.Config sizes the quota from the filesystem",
	"wheelhouse":                     `"": none`,
	"sessions.max":                   `"auto": sized from the host by session.AutoMaxSessions, as a zero session.Config.MaxSessions is; resolved when the config loads, so that jailcell config shows the number`,
	"sessions.max_per_owner":         "0: no cap below sessions.max",
	"sessions.survive_restart":       "true: the service's choice; session.Config's false is a library caller's",
	"sessions.hibernate_after":       "0: off",
	"sessions.hibernate_on_shutdown": "true: the service's choice; session.Config's false is a library caller's",
	"preload":                        "the service's data stack; session.Config's none is a library caller's",
}

// TestKeyDefaultsMatchComponentDefaults: each key in componentDefaults
// fills the named field and defaults to the component's constant, and
// every key that fills a session.Config field is either there or in
// serviceOwnDefaults, so a new session key cannot bring a second copy of
// a default.
func TestKeyDefaultsMatchComponentDefaults(t *testing.T) {
	byName := map[string]configKey{}
	for _, k := range configKeys {
		byName[k.name] = k
	}
	paired := map[string]bool{}
	for _, p := range componentDefaults {
		paired[p.key] = true
		k, ok := byName[p.key]
		if !ok {
			t.Errorf("%s: no such key in configKeys", p.key)
			continue
		}
		if reflect.TypeOf(k.def) != reflect.TypeOf(p.want) || k.def != p.want {
			t.Errorf("%s: default %v (%T), want the component's %v (%T)", p.key, k.def, k.def, p.want, p.want)
		}
		if got := fieldsFilled(t, k); len(got) != 1 || got[0] != p.field {
			t.Errorf("%s fills %v, want %s", p.key, got, p.field)
		}
	}
	for _, k := range configKeys {
		filled := fieldsFilled(t, k)
		if len(filled) == 0 || !strings.HasPrefix(filled[0], "Session.") || paired[k.name] {
			continue
		}
		if _, ok := serviceOwnDefaults[k.name]; !ok {
			t.Errorf("%s fills %s: add it to componentDefaults with session's exported default, or to serviceOwnDefaults saying why its default is the service's own", k.name, filled[0])
		}
	}
	for name := range serviceOwnDefaults {
		if _, ok := byName[name]; !ok {
			t.Errorf("serviceOwnDefaults names %s: no such key in configKeys", name)
		}
	}
}

// fieldsFilled is the fields of config (dotted paths, one level into
// struct fields) that k's decoder copies: each settable string, bool,
// integer and []string field is given a non-zero value in a source
// config, and the fields that change in the copy are the key's.
func fieldsFilled(t *testing.T, k configKey) []string {
	t.Helper()
	var src, dst config
	mark(reflect.ValueOf(&src).Elem())
	k.dec.copy(&dst, &src)
	var out []string
	var walk func(v reflect.Value, prefix string)
	walk = func(v reflect.Value, prefix string) {
		for i := range v.NumField() {
			f, sf := v.Field(i), v.Type().Field(i)
			if !sf.IsExported() {
				continue
			}
			if f.Kind() == reflect.Struct && prefix == "" {
				walk(f, sf.Name+".")
				continue
			}
			if markable(f) && !f.IsZero() {
				out = append(out, prefix+sf.Name)
			}
		}
	}
	walk(reflect.ValueOf(&dst).Elem(), "")
	return out
}

func markable(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint32, reflect.Uint64:
		return true
	case reflect.Slice:
		return v.Type().Elem().Kind() == reflect.String
	}
	return false
}

// mark gives every exported markable field of v, and of its struct fields
// one level down, a non-zero value.
func mark(v reflect.Value) {
	for i := range v.NumField() {
		f, sf := v.Field(i), v.Type().Field(i)
		if !sf.IsExported() || !f.CanSet() {
			continue
		}
		switch f.Kind() {
		case reflect.Struct:
			if v.Type() == reflect.TypeFor[config]() {
				mark(f)
			}
		case reflect.String:
			f.SetString("x")
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int, reflect.Int64, reflect.Int32:
			f.SetInt(7)
		case reflect.Uint32, reflect.Uint64:
			f.SetUint(7)
		case reflect.Slice:
			if f.Type().Elem().Kind() == reflect.String {
				f.Set(reflect.ValueOf([]string{"x"}).Convert(f.Type()))
			}
		}
	}
}

// TestPoolSizes: pool.size auto is sized from the machine and grows with
// demand; a number is kept as set (never grown: an operator's 0 is no
// pool); run keeps none.
func TestPoolSizes(t *testing.T) {
	pool, grow := poolSizes(poolAuto, "serve", 1024, true)
	if pool["default"] != session.AutoPoolSize(1024) || grow["default"] != session.AutoPoolGrow(1024, true) || grow["default"] < pool["default"] {
		t.Errorf("auto under serve: pool %v, growth %v", pool, grow)
	}
	for _, n := range []int{0, 3} {
		if pool, grow := poolSizes(n, "serve", 1024, true); pool["default"] != n || grow != nil {
			t.Errorf("pool.size %d: pool %v, growth %v, want %d and none", n, pool, grow, n)
		}
	}
	if pool, grow := poolSizes(poolAuto, "run", 1024, true); pool["default"] != 0 || grow != nil {
		t.Errorf("auto under run: pool %v, growth %v, want none", pool, grow)
	}
}
