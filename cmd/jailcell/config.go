package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	units "github.com/docker/go-units"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/rootfs"
	"github.com/jailcell/jailcell/session"
	"github.com/jailcell/jailcell/store"
	"github.com/jailcell/jailcell/workflow"
)

// Configuration comes from, lowest to highest precedence: the defaults
// below, the YAML file (/etc/jailcell/config.yaml, --config or
// JAILCELL_CONFIG), JAILCELL_* environment variables (key "a.b" is
// JAILCELL_A_B) and command-line flags. It is read here and only here;
// everything below cmd/ gets typed values.

const (
	defaultSocket = "/run/jailcell/jailcell.sock"
	envPrefix     = "JAILCELL"
)

// defaultConfigPath is the service's configuration file. A variable only
// so that this package's test binary, run as jailcell, can put it
// elsewhere (tests never touch /etc/jailcell).
var defaultConfigPath = "/etc/jailcell/config.yaml"

// configKey is one configuration key: the single place that says its
// name, default, flag, whether SIGHUP applies it, what it does and how it
// is read into config (doc.go has the recipe for adding one). Its
// environment variable follows from its name (envName), its line in
// `jailcell config` and its entry in configs/config.example.yaml from the
// whole row (TestConfigExampleGenerated keeps the file in step).
type configKey struct {
	name string
	def  any
	// flag is the flag that sets the key on commands that have it; its
	// default is then the key's default for that command.
	flag string
	// reload: SIGHUP applies a new value (serve); any other key needs a
	// restart.
	reload bool
	// doc is the key's comment in the example configuration.
	doc string
	// dec reads the key's value into its field of config.
	dec decoder
}

// configKeys are every key, in documentation order; keys sharing a
// section ("sessions.") stay together.
var configKeys = []configKey{
	{name: "socket", def: defaultSocket, flag: "socket", dec: strKey(func(c *config) *string { return &c.Socket }),
		doc: `Unix socket ` + "`jailcell serve`" + ` listens on (flag --socket), unless systemd
passes one (jailcell.socket). Created 0660 in a 0750 directory, both
owned by root and socket_group.`},
	{name: "socket_group", def: "jailcell", flag: "socket-group", dec: strKey(func(c *config) *string { return &c.SocketGroup }),
		doc: `Group owning the socket and its directory (flag --socket-group). Members
can connect; whether they may call is allowed_uids/allowed_gids' say.
If the default group does not exist the socket is root's alone
(create it: groupadd --system jailcell).`},
	{name: "allowed_uids", def: []string{}, reload: true, dec: listKey(func(c *config) *[]string { return &c.AllowedUIDs }),
		doc: `Who may call the service besides root (always allowed), by user name or
uid. Each caller is identified by the kernel (SO_PEERCRED); a session
belongs to the uid that created it, and another non-root uid gets
not_found for it.`},
	{name: "allowed_gids", def: []string{}, reload: true, dec: listKey(func(c *config) *[]string { return &c.AllowedGIDs }),
		doc: `Groups whose members (primary or supplementary group) may call, by name
or gid. Example: [jailcell]`},
	{name: "listen", def: "", flag: "listen", dec: strKey(func(c *config) *string { return &c.Listen }),
		doc: `Also serve the API on TCP (flag --listen): tcp://HOST:PORT, for a fleet
of nodes behind a proxy (docs/fleet.md). A peer uid does not cross
hosts, so serve refuses to start without auth.tokens_file or mutual TLS
(tls.cert, tls.key and tls.client_ca). "" serves the Unix socket only.`},
	{name: "auth.tokens_file", def: "", dec: strKey(func(c *config) *string { return &c.TokensFile }),
		doc: `Bearer tokens for the TCP listener: one "TOKEN OWNER" per line (OWNER a
uid or user name; # starts a comment), each token 32 or more of
[A-Za-z0-9._~+/=-]. The file must be root's and not group- or
world-accessible. A request's token decides its owner, as the peer uid
does on the socket. Read at start.`},
	{name: "tls.cert", def: "", dec: strKey(func(c *config) *string { return &c.TLSCert }),
		doc: `PEM certificate (chain) of the TCP listener; with tls.key, the listener
speaks TLS only.`},
	{name: "tls.key", def: "", dec: strKey(func(c *config) *string { return &c.TLSKey }),
		doc: `PEM private key of tls.cert.`},
	{name: "tls.client_ca", def: "", dec: strKey(func(c *config) *string { return &c.TLSClientCA }),
		doc: `PEM CA certificates for mutual TLS: each client must present a
certificate they signed, and its common name (a uid or user name) is
the caller's owner. Excludes auth.tokens_file.`},
	{name: "node.id", def: "", dec: strKey(func(c *config) *string { return &c.Session.NodeID }),
		doc: `This node's name in a fleet, 1-16 of [a-z0-9]; every new session id is
"<node.id>-<32 hex digits>" so a proxy routes by it. "": derived from
the host name (its letters and digits, lower case, at most 16).`},
	{name: "sandbox.uid_base", def: 0x40000000, dec: intKey(func(c *config) *int { return &c.UIDBase }, 1<<20, 1<<32-1<<28-1),
		doc: `First host uid (and gid) sandboxes are mapped to; they take 4096 ranges
of 65536 from here (2^28 uids). A multiple of 65536. Several daemons on
one host each need their own range (e.g. 1073741824, 1342177280,
1610612736): a daemon refuses to start on a range a live one has
claimed (sandbox.claim_dir). A state_dir keeps the range of its first
use (recorded in it, so that sessions kept across a restart can be
adopted): left on this default, a daemon starts on its state_dir's
range, and refuses to start, naming the holder's pid, if another daemon
holds it. At a state_dir's first use, this default taken by another
daemon moves it to the highest free range, and it logs which.`},
	{name: "sandbox.claim_dir", def: isolate.DefaultClaimDir, dec: strKey(func(c *config) *string { return &c.ClaimDir }),
		doc: `Directory where the daemons on this host claim their uid ranges, each
with a file it holds locked while it lives. Every daemon on one host must
use the same one; a test or a private daemon may use its own.`},
	{name: "sandbox.cgroup_root", def: "", dec: strKey(func(c *config) *string { return &c.CgroupRoot }),
		doc: `Absolute cgroup path sandboxes are created under (on every controller).
"": /jailcell for the default state_dir, /jailcell-<hash of state_dir>
for any other, so daemons with their own state_dir never share one.
Ignored under a systemd service with Delegate=yes on cgroup v2.`},
	{name: "state_dir", def: defaultStateDir, flag: "state-dir", dec: strKey(func(c *config) *string { return &c.StateDir }),
		doc: `Sandbox and session state; one jailcell process at a time uses it
(flag --state-dir).`},
	{name: "rootfs", def: rootfs.DefaultBase, flag: "rootfs", dec: strKey(func(c *config) *string { return &c.Rootfs }),
		doc: `The Python rootfs: a base directory (its current version), a version
directory, or its root/ (flag --rootfs). Built by ` + "`make rootfs`" + ` (the default
profile, with the data-science stack); the minimal profile for small hosts
is /var/lib/jailcell/rootfs-minimal (` + "`make rootfs ROOTFS_PROFILE=minimal`" + `).`},
	{name: "rootfs_rehash_after", def: 24 * time.Hour, dec: durKey(func(c *config) *time.Duration { return &c.RootfsRehashAfter }),
		doc: `serve checks the rootfs against its manifest before it builds a
sandbox. It hashes the whole tree (2-4 s on a fast host; minutes on an
emulated or slow one) when the last full hash is older than this, when
any entry's path, type, mode, owner, size, device, inode, mtime or ctime
changed since, or while a file of the tree is open for writing (as a
writable shared mapping holds it, whose writes need not move a time);
otherwise that earlier hash stands (a stamp in state_dir). The stamp
does not see writes under the file system (the block device) or bit
rot; jailcell rootfs verify and doctor always hash. 0: hash at every
start.`},
	{name: "store.url", def: store.DefaultURL, dec: strKey(func(c *config) *string { return &c.Store.URL }),
		doc: `Where persisted workspaces ("persist" at create) are kept, and hibernated
sessions when the store is shared: file:///ABSOLUTE/DIR, or
s3://BUCKET/PREFIX (S3-compatible storage, path-style; see store.s3.*).
Every object carries a sha256 checked when it is read back. See
docs/store.md.`},
	{name: "store.shared", def: false, dec: boolKey(func(c *config) *bool { return &c.Store.Shared }),
		doc: `A file store that other nodes use too (an NFS mount, or several daemons
of one host): hibernated sessions are then written to the store and any
node of the fleet can restore them. An S3 store is always shared.`},
	{name: "store.key_file", def: "", dec: strKey(func(c *config) *string { return &c.Store.KeyFile }),
		doc: `The fleet key: a file of "NAME SECRET" lines, SECRET the base64 of 32
to 64 random bytes (openssl rand -base64 32); # starts a comment. Every
object and record this node writes to the store is signed with the
first key (HMAC-SHA256), and one read back is used only if one of the
keys signed it for its own name, owner and session. Rotate by adding the
new key first and keeping the old one until its objects are gone. The
file must be this daemon's user's, mode 0600 or 0640, and the store must
never hold it. Required for a shared store (S3, or store.shared): other
nodes, and anyone with the store's credentials, write it. Read at start.
See docs/store.md.`},
	{name: "store.timeout", def: store.DefaultTimeout, dec: durKey(func(c *config) *time.Duration { return &c.Store.Timeout }),
		doc: `Bound of each store request (plus 1 s per MiB it moves). A store that
does not answer within it makes persist and hibernate answer unavailable
naming the store; cells keep running.`},
	{name: "store.s3.endpoint", def: "", dec: strKey(func(c *config) *string { return &c.Store.S3.Endpoint }),
		doc: `S3 endpoint, http(s)://HOST[:PORT], for an s3:// store.url. Credentials
are never read from this file: AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY in the environment, else an AWS shared credentials
file (store.s3.credentials_file).`},
	{name: "store.s3.region", def: "", dec: strKey(func(c *config) *string { return &c.Store.S3.Region }),
		doc: `S3 region (e.g. us-east-1); "" asks the server.`},
	{name: "store.s3.credentials_file", def: "", dec: strKey(func(c *config) *string { return &c.Store.S3.CredentialsFile }),
		doc: `AWS shared credentials file ([profile] with aws_access_key_id and
aws_secret_access_key), used when the environment has no keys; ""
is AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials.`},
	{name: "store.s3.profile", def: "", dec: strKey(func(c *config) *string { return &c.Store.S3.Profile }),
		doc: `Profile in the credentials file; "" is AWS_PROFILE, else default.`},
	{name: "store_dir", def: "", dec: strKey(func(c *config) *string { return &c.storeDir }),
		doc: `Deprecated spelling of store.url: a directory here is the store
file://DIR (a warning says so). Setting both is refused.`},
	{name: "state_quota_bytes", def: 0, dec: bytesKey(func(c *config) *int64 { return &c.Session.StateQuota }),
		doc: `Host disk state_dir may hold for sessions: checkpoint images and copies
of workspaces (hibernation, snapshots, forks), counted in allocated
bytes (holes in sparse files cost nothing). A hibernate, snapshot or fork
that would pass it fails with error code limit naming this key. Each
session's share is bounded on its own: a copy of its files at most its
disk_bytes, images at most its memory_bytes + 32 MiB, two of each at
once. A number of bytes, optionally with a unit (64GiB); 0: a quarter of
the size of the filesystem holding state_dir.`},
	{name: "store_quota_bytes", def: 0, dec: bytesKey(func(c *config) *int64 { return &c.Session.StoreQuota }),
		doc: `Bytes the store may hold: for a file store, all persisted workspaces in
allocated bytes (each also capped at the disk_bytes of the session that
writes it, less 1 MiB, so that it always restores into a session of that
policy); for an S3 store or hibernated sessions in a shared store, the
objects' sizes as this node counts them. A file that would pass it is
not persisted (logged); a hibernation is refused (limit). 0: a quarter
of the size of the filesystem holding a file store, 64 GiB for S3.`},
	{name: "wheelhouse", def: "", dec: strKey(func(c *config) *string { return &c.Session.Wheelhouse }),
		doc: `A host directory of wheels mounted read-only in every sandbox for offline
pip installs ("requirements" at create); "" for none.`},
	{name: "egress_upstream", def: "", dec: strKey(func(c *config) *string { return &c.EgressUpstream }),
		doc: `Network namespace (a path such as /run/netns/egress, or /proc/1/ns/net
for the host's own) that the gateways of "network: allowlist" sandboxes
are plugged into; routing onwards from there is the operator's. Empty:
allowlist policies are refused. See docs/egress.md.`},
	{name: "criu", def: isolate.DefaultCriu, dec: strKey(func(c *config) *string { return &c.Criu }),
		doc: `The criu binary (4.x) for hibernate, restore, fork and snapshots; make criu
builds one here. Missing or failing ` + "`criu check`" + `: those ops answer
unavailable with the reason, and sessions work as without them.`},
	{name: "log.level", def: "info", flag: "log-level", reload: true, dec: levelKey(func(c *config) *slog.Level { return &c.LogLevel }),
		doc: `debug, info, warn or error (flag --log-level). Only debug logs cell
code. The default is warn for run, json, mcp and doctor.`},
	{name: "log.format", def: "text", flag: "log-format", dec: strKey(func(c *config) *string { return &c.LogFormat }),
		doc: `text or json, on stderr (journald under systemd) (flag --log-format).`},
	{name: "sessions.max", def: 64, dec: intKey(func(c *config) *int { return &c.Session.MaxSessions }, 1, 4096),
		doc: `Live sessions at most; one-shot cells count while they run (1..4096).`},
	{name: "sessions.max_per_owner", def: 0, dec: intKey(func(c *config) *int { return &c.Session.MaxPerOwner }, 0, 4096),
		doc: `Live sessions one owner (a uid, or a token's owner) may hold at once,
creates under way and one-shot cells included, so one caller cannot
take every place under sessions.max; one more create is refused with
code limit naming this key (0..sessions.max; 0: sessions.max). Set it
on a host shared by callers who must not starve each other.`},
	{name: "sessions.idle_ttl", def: 30 * time.Minute, dec: durKey(func(c *config) *time.Duration { return &c.Session.IdleTTL }),
		doc: `Idle timeout of a session, reset by each cell; a create may ask for its
own ttl_s up to max_idle_ttl.`},
	{name: "sessions.max_idle_ttl", def: 24 * time.Hour, dec: durKey(func(c *config) *time.Duration { return &c.Session.MaxIdleTTL }),
		doc: `Ceiling of a session's idle timeout.`},
	{name: "sessions.max_lifetime", def: 24 * time.Hour, dec: durKey(func(c *config) *time.Duration { return &c.Session.MaxLifetime }),
		doc: `A session ends this long after its creation, however busy.`},
	{name: "sessions.survive_restart", def: true, dec: boolKey(func(c *config) *bool { return &c.Session.KeepOnShutdown }),
		doc: `jailcell serve only: leave live sessions (kernels, variables, files)
running when the service stops, by a drain or a crash, for the next
start to re-adopt (one not hibernated by hibernate_on_shutdown); what
cannot be re-adopted answers "lost", saying when and why. false tears
every sandbox down on SIGTERM, and those sessions answer "lost" too.
jailcell json always tears down at EOF.`},
	{name: "sessions.hibernate_after", def: time.Duration(0), dec: durKey(func(c *config) *time.Duration { return &c.Session.HibernateAfter }),
		doc: `Checkpoint a session idle this long to disk with CRIU (make criu) and
release its memory; the next exec restores it with every variable,
import and open file. Its images and a copy of its files are kept in
state_dir (about 80 MB for a numpy+pandas+matplotlib kernel), so it
also survives a restart and a reboot. 0s: never.`},
	{name: "sessions.hibernated_ttl", def: 7 * 24 * time.Hour, dec: durKey(func(c *config) *time.Duration { return &c.Session.HibernatedTTL }),
		doc: `A hibernated session unused this long is ended.`},
	{name: "sessions.max_hibernated", def: 1024, dec: intKey(func(c *config) *int { return &c.Session.MaxHibernated }, 1, 1<<20),
		doc: `Hibernated sessions hold no sandbox and do not count toward max; they
are capped on their own (each holds its images and files on disk).`},
	{name: "sessions.hibernate_on_shutdown", def: true, dec: boolKey(func(c *config) *bool { return &c.Session.HibernateOnShutdown }),
		doc: `jailcell serve only: hibernate every live session when the service
stops (a drain, a reboot), for the next start to restore; a session
that cannot be hibernated follows survive_restart. Where criu does not
work, or state_quota_bytes is below one hibernation's reservation
(memory_bytes + 32 MiB of the largest policy), sessions are only kept
running, with a log line; start is refused instead, naming the key, if
this key is set true and state_quota_bytes is set to such a number.`},
	{name: "sessions.zygote", def: true, dec: field[bool]{func(c *config) *bool { return &c.Zygote }, (*configLoader).boolean},
		doc: `Start kernels by forking a zygote of their policy: one confined
interpreter per policy that imported the preload once (milliseconds a
create, its pages shared). Each fork gets its own namespaces, uid slot
and cgroup and is checked against a cold start's confinement before
use. Where the host cannot fork one, kernels start as with false. The
sessions of one zygote share the str hash secret and the address-space
layout (SECURITY.md).`},
	{name: "sessions.template", def: true, dec: field[bool]{func(c *config) *bool { return &c.Template }, (*configLoader).boolean},
		doc: `Start kernels by restoring a checkpoint of one that already imported the
preload (one per policy, kept in state_dir, rebuilt when the rootfs,
preload, policy or criu change) instead of importing it in each
sandbox; needs a working criu, else kernels import as with false. The
sessions of one template share the str hash secret (SECURITY.md).`},
	{name: "preload", def: []string{"numpy", "pandas", "matplotlib.pyplot"}, dec: listKey(func(c *config) *[]string { return &c.Session.Preload }),
		doc: `Python modules every kernel imports before it is ready: faster first
cells, slower cold starts (about 0.4 s for these three). matplotlib uses
its non-interactive Agg backend. [] imports nothing.`},
	{name: "pool.size", def: "auto", dec: field[int]{func(c *config) *int { return &c.PoolSize }, (*configLoader).poolSize},
		doc: `Warm sessions of the default policy kept ready, kernel started and
preload imported, so a plain create (no limits override, persist or
requirements) is a hand-over instead of a start. Each serves one
session and is never reused; the pool refills in the background, one
member at a time, from the template where there is one. They count
toward sessions.max and cost memory while idle (about 70 MB each with
the default preload). "auto" (serve, json and mcp; run keeps none):
2 per CPU, at most 8, at most a quarter of sessions.max, and no more
than 5% of the machine's memory holds at 100 MB each. 0 turns the pool
off (0..sessions.max).`},
	{name: "drain_grace", def: 30 * time.Second, dec: durKey(func(c *config) *time.Duration { return &c.DrainGrace }),
		doc: `On SIGTERM, how long running cells may take to finish before they are
ended (0s..1h). A second SIGTERM ends them at once.`},
	{name: "drain_notice", def: time.Duration(0), dec: durKey(func(c *config) *time.Duration { return &c.DrainNotice }),
		doc: `On SIGTERM, how long serve keeps listening with /readyz answering 503
and creates refused, before it stops accepting and drains (0s..5m): long
enough for a proxy's health checks to take the node out of the create
pool (HAProxy: inter x fall). Sessions keep answering meanwhile. A
second SIGTERM skips it.`},
	// The front doors' bounds: MCP sessions at /mcp, streamed responses.
	{name: "mcp.max_sessions_per_owner", def: api.DefaultMCPMaxSessionsPerOwner, dec: intKey(func(c *config) *int { return &c.HTTP.MCPMaxSessionsPerOwner }, 1, 4096),
		doc: `MCP sessions one owner may hold at /mcp at once (serve), each with at
most one jailcell session; one more initialize is answered 429, code
limit, naming this key (1..4096).`},
	{name: "mcp.max_sessions", def: api.DefaultMCPMaxSessions, dec: intKey(func(c *config) *int { return &c.HTTP.MCPMaxSessions }, 1, 65536),
		doc: `MCP sessions all owners together may hold at /mcp at once (1..65536).`},
	{name: "mcp.idle_timeout", def: api.DefaultMCPIdleTimeout, dec: durKey(func(c *config) *time.Duration { return &c.HTTP.MCPIdleTimeout }),
		doc: `An MCP session at /mcp with no request for this long is ended, with
its jailcell session, and its place freed (1s..24h). A running tool
call keeps it alive.`},
	{name: "http.stream_grace", def: api.DefaultStreamGrace, dec: durKey(func(c *config) *time.Duration { return &c.HTTP.StreamGrace }),
		doc: `How long a client of a streamed response (an exec answered as JSON
lines, an MCP event stream) may fall behind: a streamed exec is cut
this long after its cell ends, and each write of an MCP response must
complete within it (1s..10m). A cell never waits for its client.`},
	{name: "http.max_in_flight", def: api.DefaultMaxInFlight, dec: intKey(func(c *config) *int { return &c.HTTP.MaxInFlight }, 1, 65536),
		doc: `Requests the HTTP API (socket and TCP) handles at once, /metrics and
health aside; more wait for a place (1..65536).`},
	{name: "http.max_in_flight_per_owner", def: api.DefaultMaxInFlight / 4, dec: intKey(func(c *config) *int { return &c.HTTP.MaxInFlightPerOwner }, 1, 65536),
		doc: `One owner's share of http.max_in_flight: a caller's further requests
wait while other callers are served (1..http.max_in_flight).`},
	{name: "http.max_in_flight_bytes", def: int64(api.DefaultMaxInFlightBytes), dec: bytesKey(func(c *config) *int64 { return &c.HTTP.MaxInFlightBytes }),
		doc: `Bytes of request bodies being read and responses not yet taken that
the HTTP API holds at once (one request always fits); more wait for a
place (1MiB..64GiB).`},
	{name: "http.max_in_flight_bytes_per_owner", def: int64(api.DefaultMaxInFlightBytes / 4), dec: bytesKey(func(c *config) *int64 { return &c.HTTP.MaxInFlightBytesPerOwner }),
		doc: `One owner's share of http.max_in_flight_bytes, so one caller's slow
bodies or unread responses cannot stall the others (one request of an
owner holding nothing always fits; 1MiB..http.max_in_flight_bytes).`},
	{name: "http.body_timeout", def: api.DefaultBodyTimeout, dec: durKey(func(c *config) *time.Duration { return &c.HTTP.BodyTimeout }),
		doc: `How long a client has to send a request body, and to take a response
that is not streamed; its place in the budget is held until then
(1s..1h).`},
	// The workflow keys: fix-and-retry, review log, failure memory.
	{name: "fixer.kind", def: "", dec: strKey(func(c *config) *string { return &c.fixer.kind }),
		doc: `--- Fix-and-retry, review log, failure memory (docs/workflow.md) ---
The fixer: "command" or "openai"; empty picks command when
fixer.command is set, else openai when fixer.openai.base_url is set,
else none ("fix" requests are refused).`},
	{name: "fixer.command", def: "", dec: strKey(func(c *config) *string { return &c.fixer.command }),
		doc: `Program (and arguments, split on spaces, no shell) that gets one JSON
object on stdin and prints new code on stdout. It runs on the host as
jailcell's user.`},
	{name: "fixer.timeout", def: 60 * time.Second, dec: durKey(func(c *config) *time.Duration { return &c.fixer.timeout }),
		doc: `Bound of one fixer call.`},
	{name: "fixer.max_attempts_ceiling", def: workflow.DefaultMaxAttemptsCeiling,
		dec: intKey(func(c *config) *int { return &c.Workflow.MaxAttemptsCeiling }, 1, workflow.MaxAttemptsCeilingLimit),
		doc: `The largest fix.max_attempts a request may ask for.`},
	{name: "fixer.openai.base_url", def: "", dec: strKey(func(c *config) *string { return &c.fixer.baseURL }),
		doc: `An OpenAI-compatible API root, e.g. http://127.0.0.1:8000/v1.`},
	{name: "fixer.openai.model", def: "", dec: strKey(func(c *config) *string { return &c.fixer.model }),
		doc: `Model name sent in each request.`},
	{name: "fixer.openai.api_key_env", def: "", dec: strKey(func(c *config) *string { return &c.fixer.apiKeyEnv }),
		doc: `Name of the environment variable holding the API key (never the key;
it is never configured, logged or echoed).`},
	{name: "review.dir", def: defaultReviewDir, flag: "review-dir", dec: strKey(func(c *config) *string { return &c.Workflow.ReviewDir }),
		doc: `Review log (review.jsonl) and failure memory (failures.json)
(flag --review-dir of ` + "`jailcell review`" + `).`},
	{name: "failures.threshold", def: workflow.DefaultThreshold, dec: intKey(func(c *config) *int { return &c.Workflow.Threshold }, 1, 1<<20),
		doc: `Failures of one fingerprint before a request is answered "skipped".`},
	{name: "failures.ttl", def: workflow.DefaultTTL, dec: durKey(func(c *config) *time.Duration { return &c.Workflow.TTL }),
		doc: `How long a fingerprint is remembered.`},
}

// config is the effective configuration.
type config struct {
	Socket      string
	SocketGroup string
	AllowedUIDs []string // user names or numbers, resolved by serve
	AllowedGIDs []string // group names or numbers, resolved by serve
	StateDir    string
	Rootfs      string
	// RootfsRehashAfter bounds how long serve trusts a full hash of an
	// unchanged rootfs (rootfs.VerifyStamped).
	RootfsRehashAfter time.Duration
	// Listen is the TCP address to serve on besides the socket (tcp://ADDR;
	// "" none), with TokensFile or the TLS* files for authentication.
	Listen      string
	TokensFile  string
	TLSCert     string
	TLSKey      string
	TLSClientCA string
	// UIDBase is the host's first sandbox uid (isolate.Config.UIDBase).
	UIDBase int
	// ClaimDir is where daemons claim uid ranges (isolate.ClaimUIDRange).
	ClaimDir string
	// CgroupRoot is the sandboxes' cgroup parent ("" derived from StateDir).
	CgroupRoot string
	// Criu is the criu binary for hibernate, restore, fork and snapshots
	// (criu 4.x; make criu builds one).
	Criu string
	// EgressUpstream is the network namespace allowlisted sandboxes'
	// gateways are plugged into ("" refuses network: allowlist).
	EgressUpstream string
	LogLevel       slog.Level
	LogFormat      string
	PoolSize       int  // pool.size: warm sessions of the default policy (0 = none, poolAuto = sized from the machine)
	Template       bool // sessions.template
	Zygote         bool // sessions.zygote
	Policies       map[string]policy.Policy
	DrainGrace     time.Duration
	// DrainNotice is how long a drain keeps listening, not ready, first.
	DrainNotice time.Duration
	// HTTP holds the HTTP transport's bounds set by keys (mcp.*,
	// http.stream_grace); serve adds access, logger, auth and readiness.
	HTTP api.HTTPOptions
	// Store opens the store (store.*); build opens it.
	Store store.Options
	// storeDir is the deprecated store_dir key; checkStore folds it into
	// Store.URL.
	storeDir string
	// Session is the session manager's configuration as far as keys set
	// it; build adds the state directory, policies, pool and logger, and
	// keeps KeepOnShutdown (sessions.survive_restart) and
	// HibernateOnShutdown for serve only.
	Session session.Config
	// Workflow is the workflow runner's configuration, fixer built from
	// the fixer.* keys; newWorkflow adds policies and logger.
	Workflow workflow.Config
	// fixer holds the fixer.* keys until buildFixer turns them into
	// Workflow.Fixer.
	fixer fixerKeys

	// File is the configuration file read ("" if none).
	File string
	// explicitFile: File was named (--config, JAILCELL_CONFIG), not the
	// default one found in place.
	explicitFile bool
	// Unreadable is why the default file could not be read by a front
	// door (loadConfigFor); nil otherwise.
	Unreadable error
	// Settings are every key's effective value and where it came from,
	// in documentation order.
	Settings []setting
	// sources maps a key to its source kind (default, file, env, flag).
	sources map[string]string
}

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

// intKey reads an integer in lo..hi.
func intKey(at func(*config) *int, lo, hi int) decoder {
	return field[int]{at, func(l *configLoader, key string) int { return int(l.integer(key, int64(lo), int64(hi))) }}
}

// reloadable says whether SIGHUP applies key.
func reloadable(key string) bool {
	for _, k := range configKeys {
		if k.name == key {
			return k.reload
		}
	}
	return false
}

// applyReloadable copies the reloadable keys' values from src into dst.
func applyReloadable(dst, src *config) {
	for _, k := range configKeys {
		if k.reload {
			k.dec.copy(dst, src)
		}
	}
}

// setting is one line of `jailcell config`.
type setting struct {
	Key, Value, Source string
}

// envName is the environment variable of a key.
func envName(key string) string {
	return envPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

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
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !explicit:
		path = ""
	case errors.Is(err, fs.ErrPermission) && !explicit && client:
		l.cfg.Unreadable = fmt.Errorf("read config file: %w", err)
		path = ""
	case err != nil:
		return nil, fmt.Errorf("read config file: %w", err)
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

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

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
		// Issue 24: unsigned, a shared store hands any writer of it host
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

// newConfigCmd is `jailcell config`: the effective configuration, as
// `jailcell serve` with the same flags and environment would use it.
func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Print the effective configuration and where each value came from",
		Long: `Print every configuration key with its effective value and its source:
default, file (the YAML file), env (a JAILCELL_* variable) or flag. Later
sources win: flags over the environment over the file over the defaults.
Exits non-zero, naming each bad key, if the configuration is invalid.`,
		Example: `  jailcell config
  JAILCELL_SESSIONS_MAX=8 jailcell config --config ./config.yaml`,
		Args: cobra.NoArgs,
	}
	hf := addServeFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		printConfig(cmd.OutOrStdout(), hf.cfg)
		return nil
	}
	return cmd
}

func printConfig(w io.Writer, c *config) {
	if c.File != "" {
		fmt.Fprintf(w, "# config file: %s\n", c.File)
	} else {
		fmt.Fprintf(w, "# config file: none (%s not found)\n", defaultConfigPath)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tVALUE\tSOURCE")
	for _, s := range c.Settings {
		v := s.Value
		if v == "" {
			v = `""`
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Key, v, s.Source)
	}
	tw.Flush()
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
