// Command jailcell runs Python cells in OS-isolated sandboxes. This package
// only wires flags and configuration to the packages that do the work; it
// must never do that work itself, and viper must never reach below it: the
// packages take typed configuration.
//
// # Configuration
//
// Every configuration key is one row of configKeys (config_keys.go): its name,
// default, flag, whether SIGHUP applies it (reload), its documentation and
// its decoder, which reads the value straight into the typed configuration
// of the component that uses it (config.Session is session.Config,
// config.Workflow is workflow.Config) or into a field of config for what
// cmd/ itself uses. From that row come the key's environment variable
// (JAILCELL_ + the name in upper case, "." as "_"), its default under
// every source (file, environment, flag), its line in `jailcell config`,
// its handling on SIGHUP and its entry in configs/config.example.yaml.
// Policies (policies.<name>.<field>) have their own schema, the fields of
// policy.Policy.
//
// # Adding a configuration key
//
//  1. Add a row to configKeys, next to its section's keys:
//     {name: "sessions.foo", def: 10, doc: "What it does.", dec:
//     intKey(func(c *config) *int { return &c.Session.Foo }, 1, 100)}.
//     The decoders are strKey, listKey, intKey (with its range), bytesKey,
//     durKey, boolKey and levelKey; the field is the component's own
//     (add it there if it is new, documented with its default) or a field
//     of config. Set flag to bind an existing flag, reload: true if a
//     running serve may take a new value (reload copies the field).
//  2. If the value has a range or depends on another key, add a check to
//     configChecks naming the key and what is allowed.
//  3. Regenerate the example:
//     go test ./cmd/jailcell -run TestConfigExampleGenerated -update
//     (the test fails until the file matches the table).
package main
