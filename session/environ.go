package session

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
)

// The environment part owns a session's environment variables as its
// kernels see them: the create's envs given to each new kernel once, a
// cell's own envs set before it runs and put back after. It must never
// touch the session table, admission or the TTL/janitor: it finds a
// session and drops a kernel that does not answer only through
// environHost.
type environ struct {
	// nonce is the Manager's (it prefixes the ids of env edits, as of
	// cells, so ids never repeat across daemon restarts).
	nonce string
	host  environHost
}

// environHost is what the environment part needs back from the Manager.
type environHost interface {
	get(owner int, id string) (*Session, error)
	dropKernel(s *Session, k *kernel)
}

// syncEnv gives k the session's environment and start directory once per
// kernel (a kernel started, restored or replaced since has its own
// os.environ and working directory: a pooled, template or zygote kernel
// was made before its session's create said what they are).
func (m *environ) syncEnv(ctx context.Context, s *Session, k *kernel) error {
	s.mu.Lock()
	envs, cwd := s.envs, s.info.Cwd
	s.mu.Unlock()
	if (len(envs) == 0 && cwd == "") || k.envSynced {
		return nil
	}
	if len(envs) > 0 {
		if err := m.setEnv(ctx, s, k, envs, nil); err != nil {
			return err
		}
	}
	if cwd != "" {
		ectx, cancel := context.WithTimeout(ctx, AssistTimeout)
		defer cancel()
		id := m.nonce + "-env-" + strconv.FormatUint(commandSeq.Add(1), 10)
		if err := k.conn.SetStartDir(ectx, id, cwd); err != nil {
			// Every sandbox has both names of the workspace; a kernel
			// that cannot enter one is not the kernel this session needs.
			m.host.dropKernel(s, k)
			return fmt.Errorf("%w: start session %s in %s: %v; its kernel was stopped", ErrUnavailable, s.id, cwd, err)
		}
	}
	k.envSynced = true
	return nil
}

// setEnv edits k's os.environ; a kernel that does not answer is dropped.
func (m *environ) setEnv(ctx context.Context, s *Session, k *kernel, set map[string]string, unset []string) error {
	ectx, cancel := context.WithTimeout(ctx, AssistTimeout)
	defer cancel()
	id := m.nonce + "-env-" + strconv.FormatUint(commandSeq.Add(1), 10)
	if err := k.conn.SetEnv(ectx, id, set, unset); err != nil {
		m.host.dropKernel(s, k)
		return fmt.Errorf("%w: set the environment of session %s: the kernel did not answer, so it was stopped: %v", ErrUnavailable, s.id, err)
	}
	return nil
}

// cellEnv sets a cell's own envs in k before it runs and returns what puts
// the session's environment back after it: each variable to the session's
// value, the kernel's base value, or unset.
func (m *environ) cellEnv(ctx context.Context, s *Session, k *kernel, envs map[string]string) (restore func(), err error) {
	if err := m.syncEnv(ctx, s, k); err != nil {
		return nil, err
	}
	if len(envs) == 0 {
		return func() {}, nil
	}
	if err := m.setEnv(ctx, s, k, envs, nil); err != nil {
		return nil, err
	}
	return func() {
		base := map[string]string{}
		for _, kv := range kernelEnv(s.policy) {
			name, val, _ := strings.Cut(kv, "=")
			base[name] = val
		}
		s.mu.Lock()
		for name, val := range s.envs {
			base[name] = val
		}
		s.mu.Unlock()
		set, unset := map[string]string{}, []string{}
		for name := range envs {
			if v, ok := base[name]; ok {
				set[name] = v
			} else {
				unset = append(unset, name)
			}
		}
		s.mu.Lock()
		live := s.k == k
		s.mu.Unlock()
		if live {
			_ = m.setEnv(context.WithoutCancel(ctx), s, k, set, unset)
		}
	}, nil
}

// setEnvs gives a session just taken from the pool its create's envs and
// start directory.
func (m *environ) setEnvs(id string, envs map[string]string, cwd string) {
	if len(envs) == 0 && cwd == "" {
		return
	}
	if s, err := m.host.get(0, id); err == nil {
		s.mu.Lock()
		if len(envs) > 0 {
			s.envs = maps.Clone(envs)
		}
		s.info.Cwd = cwd
		s.mu.Unlock()
	}
}
