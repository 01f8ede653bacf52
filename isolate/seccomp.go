package isolate

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"

	"github.com/opencontainers/runc/libcontainer/configs"

	"github.com/jailcell/jailcell/isolate/seccomp"
)

// seccompReference is seccomp.ColdFilters(cfg), computed once per configuration
// for the host's life: the programs depend only on the configuration,
// this binary's libseccomp and the kernel.
func (h *Host) seccompReference(cfg *configs.Seccomp) (seccomp.FilterSum, error) {
	return seccompCached(h, h.seccompRefs, cfg, seccomp.ColdFilters, "compute a cold start's seccomp filter")
}

// seccompCached is compute(cfg), kept in cache under cfg's digest for the
// host's life (h.mu guards cache): what a cold start's filter is depends
// only on the configuration, this binary's libseccomp and the kernel.
func seccompCached[T any](h *Host, cache map[[32]byte]T, cfg *configs.Seccomp, compute func(*configs.Seccomp) (T, error), what string) (T, error) {
	var zero T
	conf, err := json.Marshal(cfg)
	if err != nil {
		return zero, fmt.Errorf("encode seccomp configuration: %w", err)
	}
	key := sha256.Sum256(conf)
	h.mu.Lock()
	v, ok := cache[key]
	h.mu.Unlock()
	if ok {
		return v, nil
	}
	if v, err = compute(cfg); err != nil {
		return zero, fmt.Errorf("%s: %w", what, err)
	}
	h.mu.Lock()
	cache[key] = v
	h.mu.Unlock()
	return v, nil
}
