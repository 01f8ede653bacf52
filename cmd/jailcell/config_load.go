package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/jailcell/jailcell/internal/secretfile"
	"github.com/jailcell/jailcell/policy"
)

// policyFields are the configurable fields of a policy: mapstructure name
// to struct field index, in declaration order.
var policyFields = func() []struct {
	name  string
	index int
} {
	var out []struct {
		name  string
		index int
	}
	t := reflect.TypeFor[policy.Policy]()
	for i := range t.NumField() {
		name := t.Field(i).Tag.Get("mapstructure")
		if name == "" || name == "name" {
			continue
		}
		out = append(out, struct {
			name  string
			index int
		}{name, i})
	}
	return out
}()

var policyNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// configLoader reads one configuration.
type configLoader struct {
	v     *viper.Viper // every source merged, viper's precedence
	file  *viper.Viper // the file alone, to tell where a value came from
	flags *pflag.FlagSet
	keys  []configKey // configKeys (a field: the decoders in it call back)
	path  string
	errs  []error
	cfg   *config
}

// configFlag adds --config; configPath reads it.
func configFlag(fs *pflag.FlagSet) {
	fs.String("config", defaultConfigPath, "configuration file (YAML; also JAILCELL_CONFIG); the default one may be absent")
}

// maxConfigFile bounds the config file read: a config is a few KiB.
const maxConfigFile = 4 << 20

// configPath is the file to read, and whether it was asked for (a missing
// file asked for is an error; the default one may be absent).
func configPath(flags *pflag.FlagSet) (string, bool) {
	if flags != nil {
		if f := flags.Lookup("config"); f != nil && f.Changed {
			return f.Value.String(), true
		}
	}
	if p, ok := os.LookupEnv(envPrefix + "_CONFIG"); ok && p != "" {
		return p, true
	}
	return defaultConfigPath, false
}

// loadConfig reads the configuration for a command with flags (nil: no
// flags) and validates all of it, returning every problem found, each
// naming the key, the value and what is allowed.
func loadConfig(flags *pflag.FlagSet) (*config, error) {
	return loadConfigFor(flags, false)
}

// loadConfigFor is loadConfig for a front door when client is true: the
// default file being unreadable (the daemon's, 0640 root:root after make
// install, read by a member of the socket group) is then no error. A
// client that connects needs nothing from it; the socket comes from
// --connect or JAILCELL_SOCKET. The error is kept in Unreadable for a
// front door that ends up building sandboxes itself.
func loadConfigFor(flags *pflag.FlagSet, client bool) (*config, error) {
	l := &configLoader{v: viper.New(), file: viper.New(), flags: flags, keys: configKeys, cfg: &config{sources: map[string]string{}}}
	path, explicit := configPath(flags)
	// Others may read it; only root or this user may have written it: it
	// names programs root runs (fixer.command) and every policy.
	b, err := secretfile.ReadTrusted("config file", path, maxConfigFile)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !explicit:
		path = ""
	case errors.Is(err, fs.ErrPermission) && !explicit && client:
		l.cfg.Unreadable = fmt.Errorf("read config file: %w", err)
		path = ""
	case err != nil:
		return nil, fmt.Errorf("read %w", err)
	}
	l.path = path
	l.cfg.File = path
	l.cfg.explicitFile = explicit && path != ""
	for _, v := range []*viper.Viper{l.v, l.file} {
		v.SetConfigType("yaml")
		if path != "" {
			if err := v.ReadConfig(bytes.NewReader(b)); err != nil {
				return nil, fmt.Errorf("config file %s: %w", path, err)
			}
		}
	}
	l.v.SetEnvPrefix(envPrefix)
	l.v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	l.v.AutomaticEnv()
	for _, k := range configKeys {
		def := k.def
		if f := l.flag(k.name); f != nil {
			def = f.DefValue
			if err := l.v.BindPFlag(k.name, f); err != nil {
				return nil, fmt.Errorf("bind flag --%s: %w", f.Name, err)
			}
		}
		l.v.SetDefault(k.name, def)
	}
	names, err := l.policyNames()
	if err != nil {
		return nil, err
	}
	l.checkUnknown(names)
	l.decode()
	l.decodePolicies(names)
	l.resolveAuto()
	if len(l.errs) == 0 {
		l.validate()
	}
	if len(l.errs) > 0 {
		where := "invalid configuration"
		if path != "" {
			where += " (file " + path + ")"
		}
		return nil, fmt.Errorf("%s:\n  %w", where, joinLines(l.errs))
	}
	return l.cfg, nil
}

// clientKeys are the keys a front door that connects to a running
// service uses itself, or that configure no sandbox of a front door: where
// daemons claim uid ranges (host bookkeeping; a service has its own) and
// what serve alone does at a stop. Every other key configures sandboxes
// built here.
var clientKeys = map[string]bool{"socket": true, "log.level": true, "log.format": true,
	"sandbox.claim_dir": true, "sessions.survive_restart": true, "sessions.hibernate_on_shutdown": true}

// engineSettings names the sandbox settings this command was given, each
// with where it came from (flag --rootfs, env JAILCELL_STATE_DIR, file
// X): flags, JAILCELL_* variables and a file named by --config or
// JAILCELL_CONFIG. The default file found in place is not counted: it is
// the service's own. A running service takes none of these from its
// clients, so a front door given any runs the sandboxes itself or
// refuses; it never drops them silently.
func (c *config) engineSettings() []string {
	var out []string
	for _, st := range c.Settings {
		if clientKeys[st.Key] {
			continue
		}
		switch c.sources[st.Key] {
		case "flag", "env":
		case "file":
			if !c.explicitFile {
				continue
			}
		default:
			continue
		}
		out = append(out, st.Key+" ("+st.Source+")")
	}
	return out
}

// joinLines joins errors one per indented line.
func joinLines(errs []error) error {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "\n  "))
}

// flag returns the flag bound to key on this command, if any.
func (l *configLoader) flag(key string) *pflag.Flag {
	if l.flags == nil {
		return nil
	}
	for _, k := range l.keys {
		if k.name == key && k.flag != "" {
			return l.flags.Lookup(k.flag)
		}
	}
	return nil
}

// source says where key's effective value comes from, with viper's own
// precedence: a changed flag, then a non-empty environment variable, then
// the file, then the default.
func (l *configLoader) source(key string) (kind, detail string) {
	if f := l.flag(key); f != nil && f.Changed {
		return "flag", "flag --" + f.Name
	}
	if v, ok := os.LookupEnv(envName(key)); ok && v != "" {
		return "env", "env " + envName(key)
	}
	if l.path != "" && l.file.IsSet(key) {
		return "file", "file " + l.path
	}
	return "default", "default"
}

// policyNames are "default" and every policy the file names.
func (l *configLoader) policyNames() ([]string, error) {
	seen := map[string]bool{"default": true}
	raw := l.file.Get("policies")
	if raw != nil {
		m, ok := raw.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("config key policies = %v: want a map of policy name to policy fields", raw)
		}
		for name := range m {
			seen[name] = true
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	// "default" first: it is what a request naming no policy gets.
	sort.SliceStable(names, func(i, j int) bool { return names[i] == "default" && names[j] != "default" })
	return names, nil
}

// checkUnknown refuses keys the file has but nobody reads: a misspelt
// limit silently left at its default would be looser than the operator
// believes.
func (l *configLoader) checkUnknown(policies []string) {
	known := map[string]bool{}
	for _, k := range configKeys {
		known[k.name] = true
	}
	fields := map[string]bool{}
	var fieldNames []string
	for _, f := range policyFields {
		fields[f.name] = true
		fieldNames = append(fieldNames, f.name)
	}
	for _, key := range l.file.AllKeys() {
		if known[key] {
			continue
		}
		if rest, ok := strings.CutPrefix(key, "policies."); ok {
			name, field, ok := strings.Cut(rest, ".")
			switch {
			case !policyNameRE.MatchString(name):
				l.errs = append(l.errs, fmt.Errorf("policies.%s: policy name %q: want 1-32 of [a-z0-9_], starting with a letter", name, name))
			case !ok || !fields[field]:
				l.errs = append(l.errs, fmt.Errorf("%s: not a policy field; allowed: %s", key, strings.Join(fieldNames, ", ")))
			}
			continue
		}
		var all []string
		for _, k := range configKeys {
			all = append(all, k.name)
		}
		l.errs = append(l.errs, fmt.Errorf("%s: unknown key; known keys: %s, policies.<name>.<field>", key, strings.Join(all, ", ")))
	}
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
