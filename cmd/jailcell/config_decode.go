package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	units "github.com/docker/go-units"

	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/session"
)

// decoder reads one key into its field of config, and copies that field
// from one config to another (SIGHUP applies reloadable keys so).
type decoder interface {
	decode(l *configLoader, key string, c *config)
	copy(dst, src *config)
}

// field is a decoder for one field of type T.
type field[T any] struct {
	at   func(*config) *T
	read func(l *configLoader, key string) T
}

func (f field[T]) decode(l *configLoader, key string, c *config) { *f.at(c) = f.read(l, key) }
func (f field[T]) copy(dst, src *config)                         { *f.at(dst) = *f.at(src) }

func strKey(at func(*config) *string) decoder    { return field[string]{at, (*configLoader).str} }
func listKey(at func(*config) *[]string) decoder { return field[[]string]{at, (*configLoader).list} }
func bytesKey(at func(*config) *int64) decoder   { return field[int64]{at, (*configLoader).byteSize} }
func boolKey(at func(*config) *bool) decoder     { return field[bool]{at, (*configLoader).boolean} }
func levelKey(at func(*config) *slog.Level) decoder {
	return field[slog.Level]{at, (*configLoader).level}
}
func durKey(at func(*config) *time.Duration) decoder {
	return field[time.Duration]{at, (*configLoader).duration}
}

// poolAuto is pool.size "auto": sized from the machine (session.AutoPoolSize).
const poolAuto = -1

// poolSize reads pool.size: "auto" or 0..4096.
func (l *configLoader) poolSize(key string) int {
	if s, ok := l.v.Get(key).(string); ok && strings.TrimSpace(s) == "auto" {
		l.record(key, "auto")
		return poolAuto
	}
	if _, ok := toInt(l.v.Get(key)); !ok {
		l.fail(key, l.v.Get(key), `want "auto" or a number of sessions (0..4096)`)
		return 0
	}
	return int(l.integer(key, 0, 4096))
}

// sessionsAuto is sessions.max "auto": sized from the machine
// (session.AutoMaxSessions) once every key is read (resolveAuto).
const sessionsAuto = -1

// sessionsMax reads sessions.max: "auto" or 1..session.MaxSessionsCeiling.
func (l *configLoader) sessionsMax(key string) int {
	if s, ok := l.v.Get(key).(string); ok && strings.TrimSpace(s) == "auto" {
		l.record(key, "auto")
		return sessionsAuto
	}
	if _, ok := toInt(l.v.Get(key)); !ok {
		l.fail(key, l.v.Get(key), fmt.Sprintf(`want "auto" or a number of sessions (1..%d)`, session.MaxSessionsCeiling))
		return 0
	}
	return int(l.integer(key, 1, session.MaxSessionsCeiling))
}

// resolveAuto sizes sessions.max "auto" from this machine, now that
// sessions.zygote (what an idle session costs) and the policies (how many
// tasks each session may take) are read, and says how in the setting
// `jailcell config` shows.
func (l *configLoader) resolveAuto() {
	if l.cfg.Session.MaxSessions != sessionsAuto {
		return
	}
	n, why := session.AutoMaxSessions(session.ReadHostCapacity(0), l.cfg.Zygote, session.MaxPolicyPids(l.cfg.Policies))
	l.cfg.Session.MaxSessions = n
	for i := range l.cfg.Settings {
		if l.cfg.Settings[i].Key == "sessions.max" {
			l.cfg.Settings[i].Value = fmt.Sprintf("%d (auto: %s)", n, why)
		}
	}
}

// intKey reads an integer in lo..hi.
func intKey(at func(*config) *int, lo, hi int) decoder {
	return field[int]{at, func(l *configLoader, key string) int { return int(l.integer(key, int64(lo), int64(hi))) }}
}

// record notes a key's effective value for `jailcell config`.
func (l *configLoader) record(key string, value any) {
	kind, detail := l.source(key)
	l.cfg.sources[key] = kind
	l.cfg.Settings = append(l.cfg.Settings, setting{Key: key, Value: formatValue(value), Source: detail})
}

func formatValue(v any) string {
	switch x := v.(type) {
	case *[]policy.Allow:
		if x == nil || len(*x) == 0 {
			return "[]"
		}
		b, _ := json.Marshal(*x)
		return string(b)
	case []string:
		return "[" + strings.Join(x, ", ") + "]"
	case time.Duration:
		return x.String()
	case slog.Level:
		return strings.ToLower(x.String())
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

func (l *configLoader) fail(key string, raw any, want string) {
	l.errs = append(l.errs, fmt.Errorf("%s = %s (from %s): %s", key, describe(raw), func() string { _, d := l.source(key); return d }(), want))
}

func describe(raw any) string {
	if s, ok := raw.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(raw)
}

// decode reads every key of the table into cfg.
func (l *configLoader) decode() {
	for _, k := range configKeys {
		k.dec.decode(l, k.name, l.cfg)
	}
}

// level reads a log level.
func (l *configLoader) level(key string) slog.Level {
	var lvl slog.Level
	raw := l.v.Get(key)
	if s, ok := raw.(string); !ok || !validLevel(s) || lvl.UnmarshalText([]byte(s)) != nil {
		l.fail(key, raw, "allowed debug, info, warn or error")
	}
	l.record(key, lvl)
	return lvl
}

// validLevel admits the four plain names; slog alone would also take
// offsets like "info+2".
func validLevel(s string) bool {
	switch strings.ToLower(s) {
	case "debug", "info", "warn", "error":
		return true
	}
	return false
}

func (l *configLoader) str(key string) string {
	raw := l.v.Get(key)
	s, ok := raw.(string)
	if !ok {
		l.fail(key, raw, "want a string")
	}
	l.record(key, s)
	return s
}

// list accepts a YAML list, or a string of items separated by commas or
// spaces (environment variables and flags).
func (l *configLoader) list(key string) []string {
	raw := l.v.Get(key)
	var out []string
	switch x := raw.(type) {
	case nil:
	case []string:
		out = x
	case []any:
		for _, it := range x {
			switch it.(type) {
			case string, int, int64, uint64, float64:
				out = append(out, fmt.Sprint(it))
			default:
				l.fail(key, raw, "want a list of strings or numbers")
				return nil
			}
		}
	case string:
		out = strings.FieldsFunc(x, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' })
	default:
		l.fail(key, raw, "want a list")
		return nil
	}
	if out == nil {
		out = []string{}
	}
	l.record(key, out)
	return out
}

func (l *configLoader) integer(key string, lo, hi int64) int64 {
	raw := l.v.Get(key)
	n, ok := toInt(raw)
	if !ok {
		l.fail(key, raw, "want an integer")
		return 0
	}
	if n < lo || n > hi {
		l.fail(key, raw, fmt.Sprintf("allowed %d..%d", lo, hi))
	}
	l.record(key, n)
	return n
}

// byteSize reads a number of bytes, optionally with a unit (512MiB, 1g).
func (l *configLoader) byteSize(key string) int64 {
	raw := l.v.Get(key)
	n, ok := toInt(raw)
	if s, isStr := raw.(string); !ok && isStr {
		if b, err := units.RAMInBytes(strings.TrimSpace(s)); err == nil {
			n, ok = b, true
		}
	}
	if !ok {
		l.fail(key, raw, `want a number of bytes, optionally with a unit like "512MiB" or "1GiB"`)
		return 0
	}
	if n == 0 {
		l.record(key, "0 (a quarter of its filesystem)")
		return 0
	}
	l.record(key, fmt.Sprintf("%d (%s)", n, units.BytesSize(float64(n))))
	return n
}

func toInt(raw any) (int64, bool) {
	switch x := raw.(type) {
	case int:
		return int64(x), true
	case int64:
		return x, true
	case uint64:
		if x > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	case float64:
		if x != math.Trunc(x) || math.Abs(x) > 1<<53 {
			return 0, false
		}
		return int64(x), true
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
		return n, err == nil
	}
	return 0, false
}

func toDuration(raw any) (time.Duration, bool) {
	switch x := raw.(type) {
	case time.Duration:
		return x, true
	case string:
		d, err := time.ParseDuration(strings.TrimSpace(x))
		return d, err == nil
	}
	return 0, false
}

const wantDuration = `want a duration with a unit, like "90s", "30m" or "24h"`

func (l *configLoader) duration(key string) time.Duration {
	raw := l.v.Get(key)
	d, ok := toDuration(raw)
	if !ok {
		l.fail(key, raw, wantDuration)
		return 0
	}
	l.record(key, d)
	return d
}

// decodePolicies reads policies.<name>.<field>. Each named policy starts
// from policy.Default(), so a field left out keeps its secure default.
func (l *configLoader) decodePolicies(names []string) {
	l.cfg.Policies = map[string]policy.Policy{}
	for _, name := range names {
		if !policyNameRE.MatchString(name) {
			continue // reported by checkUnknown
		}
		p := policy.Default()
		p.Name = name
		v := reflect.ValueOf(&p).Elem()
		bad := false
		for _, f := range policyFields {
			key := "policies." + name + "." + f.name
			fv := v.Field(f.index)
			raw := l.v.Get(key)
			if raw != nil && !l.setField(key, f.name, fv, raw) {
				bad = true
				continue
			}
			if n, ok := fv.Interface().(int64); ok && strings.HasSuffix(f.name, "_bytes") {
				l.record(key, fmt.Sprintf("%d (%s)", n, units.BytesSize(float64(n))))
				continue
			}
			l.record(key, fv.Interface())
		}
		if bad {
			continue
		}
		if err := p.Validate(); err != nil {
			// "invalid policy: pids = 1, allowed 8..65536" becomes
			// "policies.NAME.pids = 1, allowed 8..65536": the full key.
			for _, e := range unjoin(err) {
				msg := e.Error()
				if rest, ok := strings.CutPrefix(msg, policy.ErrInvalid.Error()+": "); ok {
					l.errs = append(l.errs, fmt.Errorf("policies.%s.%s", name, rest))
					continue
				}
				l.errs = append(l.errs, fmt.Errorf("policies.%s: %s", name, msg))
			}
			continue
		}
		l.cfg.Policies[name] = p
	}
}

// setField converts raw to a policy field's type. Sizes (fields named
// *_bytes) may carry a unit: 512MiB, 1g.
func (l *configLoader) setField(key, field string, fv reflect.Value, raw any) bool {
	switch fv.Interface().(type) {
	case time.Duration:
		d, ok := toDuration(raw)
		if !ok {
			l.fail(key, raw, wantDuration)
			return false
		}
		fv.SetInt(int64(d))
	case int64:
		n, ok := toInt(raw)
		if s, isStr := raw.(string); !ok && isStr && strings.HasSuffix(field, "_bytes") {
			if b, err := units.RAMInBytes(strings.TrimSpace(s)); err == nil {
				n, ok = b, true
			}
		}
		if !ok {
			want := "want an integer"
			if strings.HasSuffix(field, "_bytes") {
				want = `want a number of bytes, optionally with a unit like "512MiB" or "1GiB"`
			}
			l.fail(key, raw, want)
			return false
		}
		fv.SetInt(n)
	case uint64:
		n, ok := toInt(raw)
		if !ok || n < 0 {
			l.fail(key, raw, "want a non-negative integer")
			return false
		}
		fv.SetUint(uint64(n))
	case float64:
		var x float64
		var ok bool
		switch r := raw.(type) {
		case float64:
			x, ok = r, true
		case int:
			x, ok = float64(r), true
		case string:
			var err error
			x, err = strconv.ParseFloat(strings.TrimSpace(r), 64)
			ok = err == nil
		}
		if !ok {
			l.fail(key, raw, "want a number")
			return false
		}
		fv.SetFloat(x)
	case string:
		s, ok := raw.(string)
		if !ok {
			l.fail(key, raw, "want a string")
			return false
		}
		fv.SetString(s)
	case *[]policy.Allow:
		// A list of {host|ip|cidr, ports}; decoded strictly through JSON
		// so that a misspelt key is an error, not an entry allowing less
		// or more than meant.
		b, err := json.Marshal(raw)
		if err != nil {
			l.fail(key, raw, "want a list of {host|ip|cidr, ports}")
			return false
		}
		var list []policy.Allow
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&list); err != nil {
			l.fail(key, raw, "want a list of {host|ip|cidr, ports}: "+err.Error())
			return false
		}
		fv.Set(reflect.ValueOf(&list))
	default:
		l.fail(key, raw, "unsupported field type")
		return false
	}
	return true
}

// boolean accepts true/false (YAML) or "true"/"false"/"1"/"0" (env, flags).
func (l *configLoader) boolean(key string) bool {
	raw := l.v.Get(key)
	var b bool
	switch x := raw.(type) {
	case bool:
		b = x
	case string:
		v, err := strconv.ParseBool(x)
		if err != nil {
			l.fail(key, raw, "want true or false")
		}
		b = v
	default:
		l.fail(key, raw, "want true or false")
	}
	l.record(key, b)
	return b
}
