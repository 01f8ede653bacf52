package main

import (
	"log/slog"
	"strings"
	"time"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/api/httpapi"
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
	{name: "e2b.listen", def: "", flag: "e2b-listen", dec: strKey(func(c *config) *string { return &c.E2BListen }),
		doc: `Also serve E2B's protocol on TCP (flag --e2b-listen): tcp://HOST:PORT,
for programs written for E2B's stock SDKs, with E2B_API_URL and
E2B_SANDBOX_URL set to http://HOST:PORT (docs/e2b.md). An X-API-KEY is a
token of auth.tokens_file, which must be set. With tls.cert and tls.key
the listener speaks TLS only. "" serves no E2B door.`},
	{name: "e2b.domain", def: "", dec: strKey(func(c *config) *string { return &c.E2BDomain }),
		doc: `The domain of E2B_DOMAIN: requests to PORT-ID.DOMAIN reach sandbox ID's
port PORT on the E2B listener. "": sandboxes are reached by
E2B_SANDBOX_URL's headers only.`},
	{name: "e2b.templates", def: []string{}, dec: listKey(func(c *config) *[]string { return &c.E2BTemplates }),
		doc: `E2B template names a create may ask for, each NAME=POLICY (a policy of
policies:); a name not listed is refused with the list. []: "base" and
"code-interpreter-v1", both the default policy.`},
	{name: "e2b.public_ports", def: false, dec: boolKey(func(c *config) *bool { return &c.E2BPublicPorts }),
		doc: `Let requests without a sandbox's access token reach the servers it runs
(its ports but envd's and the interpreter's: the SDKs' getHost), as
E2B's sandboxes are unless made with network.allowPublicTraffic false.
false: every port needs the token (header e2b-traffic-access-token). A
sandbox's id is no secret on its host (its cgroup is named after it):
true opens such ports to everyone who can reach the E2B listener.`},
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
	{name: "sandbox.uid_base", def: isolate.DefaultUIDBase, dec: intKey(func(c *config) *int { return &c.UIDBase }, 1<<20, 1<<32-1<<28-1),
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
	{name: "sessions.max", def: "auto", dec: field[int]{func(c *config) *int { return &c.Session.MaxSessions }, (*configLoader).sessionsMax},
		doc: `Live sessions at most; one-shot cells count while they run (1..4096).
"auto" sizes it from the machine: the smallest of half its memory at
12 MB an idle session (forked from a zygote; 100 MB with
sessions.zygote false), 512 per CPU, the 4096 sandbox uid slots less 64
the daemon keeps, the daemon's open-file limit at 16 per session less
1024, and three quarters of the host's tasks (kernel.pid_max or
threads-max, the smaller) at the largest policy's pids a session, so
that a fork bomb in every session still leaves the host a quarter; at
least 1. A 24 GiB, 2-core host gets 1024 with kernel.pid_max 4194304
(systemd's), 192 with the kernel's own default of 32768. jailcell
config shows the number and which bound decided it.`},
	{name: "sessions.max_per_owner", def: 0, dec: intKey(func(c *config) *int { return &c.Session.MaxPerOwner }, 0, 4096),
		doc: `Live sessions one owner (a uid, or a token's owner) may hold at once,
creates under way and one-shot cells included, so one caller cannot
take every place under sessions.max; one more create is refused with
code limit naming this key (0..sessions.max; 0: sessions.max). Set it
on a host shared by callers who must not starve each other.`},
	{name: "sessions.idle_ttl", def: session.DefaultIdleTTL, dec: durKey(func(c *config) *time.Duration { return &c.Session.IdleTTL }),
		doc: `Idle timeout of a session, reset by each cell; a create may ask for its
own ttl_s up to max_idle_ttl.`},
	{name: "sessions.max_idle_ttl", def: session.DefaultMaxIdleTTL, dec: durKey(func(c *config) *time.Duration { return &c.Session.MaxIdleTTL }),
		doc: `Ceiling of a session's idle timeout.`},
	{name: "sessions.max_lifetime", def: session.DefaultMaxLifetime, dec: durKey(func(c *config) *time.Duration { return &c.Session.MaxLifetime }),
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
	{name: "sessions.hibernated_ttl", def: session.DefaultHibernatedTTL, dec: durKey(func(c *config) *time.Duration { return &c.Session.HibernatedTTL }),
		doc: `A hibernated session unused this long is ended.`},
	{name: "sessions.max_hibernated", def: session.DefaultMaxHibernated, dec: intKey(func(c *config) *int { return &c.Session.MaxHibernated }, 1, 1<<20),
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
member at a time, from the template where there is one, yielding to
creates: a refill starts once no cold create is starting and 150 ms
have passed since the last create (held back 1 s at most), so the CPU
goes to new sessions' first commands first. They count
toward sessions.max and cost memory while idle (about 70 MB each with
the default preload; about 9 MB forked from a zygote). "auto" (serve,
json and mcp; run keeps none): 2 per CPU, at most 8, at most a quarter
of sessions.max, and no more than 5% of the machine's memory holds at
100 MB each; an auto pool grows with demand to the most plain creates
seen in any minute, held 10 minutes after that peak, up to 24 (at most
a quarter of sessions.max and 5% of memory at 15 MB each forked from a
zygote, 100 MB otherwise). A number is kept as it is. 0 turns the pool
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
	{name: "mcp.max_sessions_per_owner", def: httpapi.DefaultMCPMaxSessionsPerOwner, dec: intKey(func(c *config) *int { return &c.HTTP.MCPMaxSessionsPerOwner }, 1, 4096),
		doc: `MCP sessions one owner may hold at /mcp at once (serve), each with at
most one jailcell session; one more initialize is answered 429, code
limit, naming this key (1..4096).`},
	{name: "mcp.max_sessions", def: httpapi.DefaultMCPMaxSessions, dec: intKey(func(c *config) *int { return &c.HTTP.MCPMaxSessions }, 1, 65536),
		doc: `MCP sessions all owners together may hold at /mcp at once (1..65536).`},
	{name: "mcp.idle_timeout", def: httpapi.DefaultMCPIdleTimeout, dec: durKey(func(c *config) *time.Duration { return &c.HTTP.MCPIdleTimeout }),
		doc: `An MCP session at /mcp with no request for this long is ended, with
its jailcell session, and its place freed (1s..24h). A running tool
call keeps it alive.`},
	{name: "http.stream_grace", def: httpapi.DefaultStreamGrace, dec: durKey(func(c *config) *time.Duration { return &c.HTTP.StreamGrace }),
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
	{name: "http.body_timeout", def: httpapi.DefaultBodyTimeout, dec: durKey(func(c *config) *time.Duration { return &c.HTTP.BodyTimeout }),
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
(flag --review-dir of ` + "`jailcell review`" + `). A directory owned by
jailcell's user, not writable by group or others; made 0700 if missing.`},
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
	// E2BListen, E2BDomain, E2BTemplates and E2BPublicPorts configure the
	// E2B door.
	E2BListen      string
	E2BDomain      string
	E2BTemplates   []string
	E2BPublicPorts bool
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
	HTTP httpapi.HTTPOptions
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
