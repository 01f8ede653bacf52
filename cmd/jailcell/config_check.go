package main

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jailcell/jailcell/rootfs"
)

var moduleRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// configChecks validate the decoded plain keys, one small check each.
var configChecks = []func(c *config) error{
	func(c *config) error {
		if !filepath.IsAbs(c.Socket) || len(c.Socket) > 107 {
			return fmt.Errorf("socket = %q: want an absolute path of at most 107 bytes (the Unix socket limit)", c.Socket)
		}
		return nil
	},
	func(c *config) error {
		if c.SocketGroup == "" {
			return errors.New(`socket_group = "": want a group name or number ("root" for root only)`)
		}
		return nil
	},
	func(c *config) error { return absOrEmpty("state_dir", c.StateDir, false) },
	func(c *config) error { return absOrEmpty("sandbox.claim_dir", c.ClaimDir, false) },
	checkNodeID,
	checkListen,
	checkE2B,
	func(c *config) error { return absOrEmpty("auth.tokens_file", c.TokensFile, true) },
	func(c *config) error { return absOrEmpty("tls.cert", c.TLSCert, true) },
	func(c *config) error { return absOrEmpty("tls.key", c.TLSKey, true) },
	func(c *config) error { return absOrEmpty("tls.client_ca", c.TLSClientCA, true) },
	func(c *config) error {
		if c.UIDBase%65536 != 0 {
			return fmt.Errorf("sandbox.uid_base = %d: want a multiple of 65536 (the uids of one sandbox)", c.UIDBase)
		}
		return nil
	},
	func(c *config) error {
		if c.CgroupRoot == "" {
			return nil
		}
		if !filepath.IsAbs(c.CgroupRoot) || filepath.Clean(c.CgroupRoot) != c.CgroupRoot || c.CgroupRoot == "/" {
			return fmt.Errorf(`sandbox.cgroup_root = %q: want a clean absolute cgroup path below / (like /jailcell-n1), or "" (derived from state_dir)`, c.CgroupRoot)
		}
		return nil
	},
	func(c *config) error { return quotaRange("state_quota_bytes", c.Session.StateQuota) },
	func(c *config) error { return quotaRange("store_quota_bytes", c.Session.StoreQuota) },
	func(c *config) error {
		if c.Rootfs == "" {
			return fmt.Errorf(`rootfs = "": want the rootfs base directory (default %s)`, rootfs.DefaultBase)
		}
		return nil
	},
	checkStore,
	func(c *config) error { return absOrEmpty("wheelhouse", c.Session.Wheelhouse, true) },
	func(c *config) error {
		if c.LogFormat != "text" && c.LogFormat != "json" {
			return fmt.Errorf("log.format = %q: allowed text or json", c.LogFormat)
		}
		return nil
	},
	func(c *config) error {
		return durRange("sessions.max_idle_ttl", c.Session.MaxIdleTTL, time.Second, 365*24*time.Hour)
	},
	func(c *config) error {
		return durRange("sessions.idle_ttl", c.Session.IdleTTL, time.Second, c.Session.MaxIdleTTL)
	},
	func(c *config) error {
		return durRange("sessions.max_lifetime", c.Session.MaxLifetime, time.Second, 365*24*time.Hour)
	},
	func(c *config) error { return durRange("drain_grace", c.DrainGrace, 0, time.Hour) },
	func(c *config) error { return durRange("drain_notice", c.DrainNotice, 0, 5*time.Minute) },
	func(c *config) error {
		return durRange("mcp.idle_timeout", c.HTTP.MCPIdleTimeout, time.Second, 24*time.Hour)
	},
	func(c *config) error {
		return durRange("http.stream_grace", c.HTTP.StreamGrace, time.Second, 10*time.Minute)
	},
	func(c *config) error {
		return durRange("http.body_timeout", c.HTTP.BodyTimeout, time.Second, time.Hour)
	},
	func(c *config) error {
		if c.HTTP.MaxInFlightPerOwner > c.HTTP.MaxInFlight {
			return fmt.Errorf("http.max_in_flight_per_owner = %d: want at most http.max_in_flight (%d)", c.HTTP.MaxInFlightPerOwner, c.HTTP.MaxInFlight)
		}
		return nil
	},
	func(c *config) error {
		if c.HTTP.MaxInFlightBytes < 1<<20 || c.HTTP.MaxInFlightBytes > 64<<30 {
			return fmt.Errorf("http.max_in_flight_bytes = %d: want 1MiB..64GiB", c.HTTP.MaxInFlightBytes)
		}
		if c.HTTP.MaxInFlightBytesPerOwner < 1<<20 || c.HTTP.MaxInFlightBytesPerOwner > c.HTTP.MaxInFlightBytes {
			return fmt.Errorf("http.max_in_flight_bytes_per_owner = %d: want 1MiB..http.max_in_flight_bytes (%d)", c.HTTP.MaxInFlightBytesPerOwner, c.HTTP.MaxInFlightBytes)
		}
		return nil
	},
	func(c *config) error {
		if c.HTTP.MCPMaxSessionsPerOwner > c.HTTP.MCPMaxSessions {
			return fmt.Errorf("mcp.max_sessions_per_owner = %d: want at most mcp.max_sessions (%d)", c.HTTP.MCPMaxSessionsPerOwner, c.HTTP.MCPMaxSessions)
		}
		return nil
	},
	func(c *config) error {
		if c.Session.MaxPerOwner > c.Session.MaxSessions {
			return fmt.Errorf("sessions.max_per_owner = %d: want 0..sessions.max (%d)", c.Session.MaxPerOwner, c.Session.MaxSessions)
		}
		return nil
	},
	func(c *config) error {
		if c.PoolSize != poolAuto && c.PoolSize > c.Session.MaxSessions {
			return fmt.Errorf("pool.size = %d: at most sessions.max (%d); pooled sessions count toward it", c.PoolSize, c.Session.MaxSessions)
		}
		return nil
	},
	func(c *config) error {
		for _, m := range c.Session.Preload {
			if !moduleRE.MatchString(m) {
				return fmt.Errorf("preload = %q: want Python module names like numpy or matplotlib.pyplot", m)
			}
		}
		return nil
	},
	func(c *config) error {
		for _, list := range []struct {
			key   string
			items []string
		}{{"allowed_uids", c.AllowedUIDs}, {"allowed_gids", c.AllowedGIDs}} {
			for _, it := range list.items {
				if n, err := strconv.ParseInt(it, 10, 64); err == nil && (n < 0 || n > math.MaxUint32-1) {
					return fmt.Errorf("%s = %s: a numeric id must be 0..%d", list.key, it, uint32(math.MaxUint32-1))
				}
			}
		}
		return nil
	},
	func(c *config) error { return positive("fixer.timeout", c.fixer.timeout) },
	func(c *config) error { return positive("failures.ttl", c.Workflow.TTL) },
	func(c *config) error {
		if c.Workflow.ReviewDir == "" {
			c.Workflow.ReviewDir = defaultReviewDir // as if unset
		}
		return absOrEmpty("review.dir", c.Workflow.ReviewDir, false)
	},
	buildFixer,
}

func (l *configLoader) validate() {
	for _, c := range configChecks {
		if err := c(l.cfg); err != nil {
			l.errs = append(l.errs, err)
		}
	}
}

// checkStore folds the deprecated store_dir into store.url and checks the
// store.* keys; the store is opened (and an S3 one's credentials read) by
// build.
func checkStore(c *config) error {
	if c.storeDir != "" {
		if c.sources["store.url"] != "default" {
			return fmt.Errorf("store_dir = %q and store.url = %q: store_dir is the deprecated spelling of store.url; set only store.url", c.storeDir, c.Store.URL)
		}
		if err := absOrEmpty("store_dir", c.storeDir, false); err != nil {
			return err
		}
		c.Store.URL = "file://" + filepath.Clean(c.storeDir)
	}
	switch scheme, _, _ := strings.Cut(c.Store.URL, "://"); scheme {
	case "file":
	case "s3":
		if c.Store.S3.Endpoint == "" {
			return fmt.Errorf("store.url = %q needs store.s3.endpoint (http(s)://HOST[:PORT])", c.Store.URL)
		}
	default:
		return fmt.Errorf("store.url = %q: want file:///ABSOLUTE/DIR or s3://BUCKET/PREFIX", c.Store.URL)
	}
	if err := absOrEmpty("store.key_file", c.Store.KeyFile, true); err != nil {
		return err
	}
	if shared := strings.HasPrefix(c.Store.URL, "s3://") || c.Store.Shared; shared && c.Store.KeyFile == "" {
		// Store attack: unsigned, a shared store hands any writer of it host
		// paths, owners and confinement.
		return fmt.Errorf("store.url = %q is a shared store (S3, or store.shared): set store.key_file to the fleet key file; objects from a shared store are used only when signed with it (docs/store.md)", c.Store.URL)
	}
	if f := c.Store.S3.CredentialsFile; f != "" && !filepath.IsAbs(f) {
		return fmt.Errorf("store.s3.credentials_file = %q: want an absolute path", f)
	}
	return durRange("store.timeout", c.Store.Timeout, time.Second, time.Hour)
}

func absOrEmpty(key, v string, emptyOK bool) error {
	if v == "" && emptyOK {
		return nil
	}
	if !filepath.IsAbs(v) {
		what := "an absolute path"
		if emptyOK {
			what += ` or "" (off)`
		}
		return fmt.Errorf("%s = %q: want %s", key, v, what)
	}
	return nil
}

// quotaRange admits 0 (the default) or 16 MiB..1 PiB.
func quotaRange(key string, n int64) error {
	if n != 0 && (n < 16<<20 || n > 1<<50) {
		return fmt.Errorf("%s = %d: allowed 0 (a quarter of the filesystem) or 16MiB..1PiB", key, n)
	}
	return nil
}

func positive(key string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%s = %s: want a positive duration such as 30s or 24h", key, d)
	}
	return nil
}

func durRange(key string, d, lo, hi time.Duration) error {
	if d < lo || d > hi {
		return fmt.Errorf("%s = %s: allowed %s..%s", key, d, lo, hi)
	}
	return nil
}
