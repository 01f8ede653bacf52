package store

// OpenUnsigned opens a store without its fleet key: the contract tests
// check the backends underneath the signature, and the attack tests write
// as an attacker who has the store's credentials but not the key would.
func OpenUnsigned(opts Options) (Store, error) { return openRaw(opts) }
