package session

import (
	"fmt"
	"time"
)

// A session's max lifetime is hard: it ends the session however busy.
// Cells used to run on past it (the janitor skipped busy sessions and
// nothing else looked), 23 back-to-back cells of a 14 s session ran until
// 34.7 s, and a hibernated session woke past it with its variables. So:
// every request on a session past its lifetime is refused (lookup), a
// cell's timeout is cut to the time left (prepareCell) so that the host
// interrupts and then kills it at the lifetime like any timed-out cell,
// the janitor ends the session (busy ones after that interrupt's grace),
// a hibernated one is never woken, and a taker from a shared store checks
// the stored creation and lifetime before it downloads any image.

// lifeSlack is how long past a busy session's lifetime and its policy's
// interrupt grace the janitor waits before ending the session itself: its
// cell is then killed already, and only its result is being measured.
const lifeSlack = 2 * time.Second

// lifeEnd returns s's max lifetime and when it runs out.
func (m *Manager) lifeEnd(s *Session) (time.Duration, time.Time) {
	s.mu.Lock()
	created, life := s.created, s.maxLife
	s.mu.Unlock()
	if life <= 0 {
		life = m.cfg.MaxLifetime
	}
	return life, created.Add(life)
}

// lifeWhy says which limit ended a session and when.
func lifeWhy(life time.Duration, end time.Time) string {
	return fmt.Sprintf("max_lifetime %s reached at %s", life, end.UTC().Format(time.RFC3339Nano))
}

// expiredErr is the answer for session id, ended (or due to end) for why.
func expiredErr(id, why string) error { return &expiredError{id: id, why: why} }

// expiredError is an ErrExpired that keeps why, for the tombstone.
type expiredError struct{ id, why string }

func (e *expiredError) Error() string {
	return "session " + e.id + " " + ErrExpired.Error() + ": " + e.why
}
func (e *expiredError) Unwrap() error { return ErrExpired }

// pastLife is ErrExpired if s is past its lifetime at now, else nil.
func (m *Manager) pastLife(s *Session, now time.Time) error {
	life, end := m.lifeEnd(s)
	if now.Before(end) {
		return nil
	}
	return expiredErr(s.id, lifeWhy(life, end))
}

// metaPastLife is pastLife for stored metadata (clamped first, as
// hibernatedSession does): what a taker checks before restoring.
func (m *Manager) metaPastLife(meta sessionMeta, now time.Time) error {
	meta = m.dur.clampMeta(meta, now)
	life := meta.MaxLife
	if life <= 0 {
		life = m.cfg.MaxLifetime
	}
	if end := meta.Created.Add(life); !now.Before(end) {
		return expiredErr(meta.ID, lifeWhy(life, end))
	}
	return nil
}

// capToLife cuts c's timeout to what is left of its session's lifetime,
// so that the cell is interrupted, then killed, when the session's life
// ends (judge names the lifetime). ErrExpired if nothing is left.
func (m *Manager) capToLife(c *cell) error {
	life, end := m.lifeEnd(c.s)
	left := time.Until(end)
	if left <= 0 {
		return expiredErr(c.s.id, lifeWhy(life, end))
	}
	if left < c.timeout {
		c.timeout, c.lifetime = left, life
	}
	return nil
}
