"""The table of settings (`SETTINGS`): for each, its name and aliases, its kind, its
default, whether CONFIG SET may change it, whether its value must not be logged, and
the one-line doc and section from which conf/narad.conf is generated.

Table order is the order in which CONFIG GET answers a glob, CONFIG REWRITE appends
settings and conf/narad.conf lists them. `lookup` finds a setting by any of its names,
in any case.
"""

from __future__ import annotations

from typing import NamedTuple

from narad.config.kinds import (
    AUTO_PORT,
    BindKind,
    BoolKind,
    BufferLimit,
    BufferLimitKind,
    EnumKind,
    IntKind,
    Kind,
    MemoryKind,
    OutputBufferLimits,
    PercentilesKind,
    PortOrAutoKind,
    ReplicaOfKind,
    SaveKind,
    StringKind,
)
from narad.config.numbers import GB, INT_MAX, KB, LLONG_MAX, MB, UINT_MAX


class Setting(NamedTuple):
    """One setting. `default` is the typed value; `mutable` False means CONFIG SET
    refuses it ("can't set immutable config"); `sensitive` values (passwords) must
    not be logged; `doc` is one line for conf/narad.conf."""

    name: str
    kind: Kind
    default: object
    doc: str
    section: str
    mutable: bool = True
    aliases: tuple[str, ...] = ()
    sensitive: bool = False

    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


NETWORK = "Network"
SERVER = "Server"
LIMITS = "Protocol limits"
STORAGE = "Durability and storage"
STREAMS = "Streams"
SLOWLOG = "Slow log and latency"
REPLICATION = "Replication"
TLS = "TLS"
METRICS = "Metrics and dashboard"

DEFAULT_OUTPUT_BUFFER_LIMITS = OutputBufferLimits(
    normal=BufferLimit(GB, 0, 0),
    replica=BufferLimit(256 * MB, 64 * MB, 60),
    pubsub=BufferLimit(32 * MB, 8 * MB, 60),
)

SETTINGS: tuple[Setting, ...] = (
    Setting("port", IntKind(0, 65535), 6379, "TCP port to listen on.", NETWORK),
    Setting(
        "bind",
        BindKind(),
        "127.0.0.1",
        "Addresses to listen on, separated by spaces.",
        NETWORK,
    ),
    Setting(
        "protected-mode",
        BoolKind(),
        True,
        "While requirepass is empty, accept clients from loopback addresses only.",
        NETWORK,
    ),
    Setting(
        "requirepass",
        StringKind(),
        "",
        "The default user's password, which clients give with AUTH or HELLO (empty: the "
        "default user needs none). Other users: `user` lines or aclfile (docs/security.md).",
        NETWORK,
        sensitive=True,
    ),
    Setting(
        "aclfile",
        StringKind(),
        "",
        "A file of ACL users (`user <name> <rule> ...` lines), read at start and by ACL "
        "LOAD, written by ACL SAVE (empty: none; then `user` lines in this file may "
        "declare users, but not both).",
        NETWORK,
        mutable=False,
    ),
    Setting(
        "acllog-max-len",
        IntKind(0, LLONG_MAX),
        128,
        "Most entries ACL LOG keeps (refused commands and keys, failed log-ins).",
        NETWORK,
    ),
    Setting(
        "maxclients",
        IntKind(1, UINT_MAX),
        10000,
        "Most clients connected at once; further ones are refused. Each client holds a "
        "file descriptor, and so does each open segment file: at start the server lifts "
        "its soft open-files limit to the hard one (ulimit -Hn), and lowers maxclients to "
        "what that limit holds beside 64 reserved descriptors and 64 segment files.",
        NETWORK,
    ),
    Setting(
        "timeout",
        IntKind(0, INT_MAX),
        0,
        "Close a client idle for this many seconds (0: never).",
        NETWORK,
    ),
    Setting(
        "tcp-keepalive",
        IntKind(0, INT_MAX),
        300,
        "TCP keepalive on client connections: the first probe after this many idle"
        " seconds, then one every third of it, dropped after 3 unanswered (0: off). A"
        " change applies to connections accepted after it.",
        NETWORK,
    ),
    Setting(
        "tls-port",
        IntKind(0, 65535),
        0,
        "TCP port to listen on for TLS connections (0: none). With tls-port set, port 0"
        " listens on no plain TCP port at all; without it, port 0 is one ephemeral port.",
        TLS,
    ),
    Setting(
        "tls-cert-file",
        StringKind(),
        "",
        "The certificate (PEM, with its chain) the node presents on its TLS port, and"
        " to its leader unless tls-client-cert-file is set.",
        TLS,
    ),
    Setting(
        "tls-key-file",
        StringKind(),
        "",
        "The private key of tls-cert-file (PEM).",
        TLS,
    ),
    Setting(
        "tls-key-file-pass",
        StringKind(),
        "",
        "The password of tls-key-file, if it is encrypted.",
        TLS,
        sensitive=True,
    ),
    Setting(
        "tls-client-cert-file",
        StringKind(),
        "",
        "The certificate a replica presents to its leader (empty: tls-cert-file).",
        TLS,
    ),
    Setting(
        "tls-client-key-file",
        StringKind(),
        "",
        "The private key of tls-client-cert-file.",
        TLS,
    ),
    Setting(
        "tls-client-key-file-pass",
        StringKind(),
        "",
        "The password of tls-client-key-file, if it is encrypted.",
        TLS,
        sensitive=True,
    ),
    Setting(
        "tls-ca-cert-file",
        StringKind(),
        "",
        "The CA certificates (PEM) that clients' certificates, and the leader's, are"
        " verified against.",
        TLS,
    ),
    Setting(
        "tls-ca-cert-dir",
        StringKind(),
        "",
        "A folder of CA certificates (named by hash, as c_rehash makes them), besides or"
        " instead of tls-ca-cert-file.",
        TLS,
    ),
    Setting(
        "tls-auth-clients",
        EnumKind(("no", "yes", "optional")),
        "yes",
        "Whether clients on the TLS port must present a certificate the CA signed: yes"
        " (required), optional (verified if presented), no (not asked for).",
        TLS,
    ),
    Setting(
        "tls-replication",
        BoolKind(),
        False,
        "A replica connects to its leader with TLS (the leader's port is then its"
        " tls-port), and announces its own tls-port. Applies from the link's next"
        " connection.",
        TLS,
    ),
    Setting(
        "tls-protocols",
        StringKind(),
        "",
        "The TLS versions allowed, separated by spaces: TLSv1, TLSv1.1, TLSv1.2, TLSv1.3;"
        " the range from the oldest to the newest named is allowed (empty: TLSv1.2 and"
        " TLSv1.3).",
        TLS,
    ),
    Setting(
        "tls-ciphers",
        StringKind(),
        "",
        "The cipher list for TLSv1.2 and older, in OpenSSL's syntax (empty: Python's"
        " default).",
        TLS,
    ),
    Setting(
        "tls-ciphersuites",
        StringKind(),
        "",
        "The TLSv1.3 cipher suites, separated by colons, in OpenSSL's syntax (empty:"
        " OpenSSL's default).",
        TLS,
    ),
    Setting(
        "tls-prefer-server-ciphers",
        BoolKind(),
        False,
        "Choose the cipher by the node's order of preference, not the client's.",
        TLS,
    ),
    Setting(
        "databases",
        IntKind(1, INT_MAX),
        16,
        "Number of databases, selected with SELECT 0 .. n-1.",
        SERVER,
        mutable=False,
    ),
    Setting(
        "dir",
        StringKind(),
        "./narad-data",
        "Folder that holds the logs (relative to the folder Narad starts in).",
        SERVER,
        mutable=False,
    ),
    Setting(
        "loglevel",
        EnumKind(("debug", "verbose", "notice", "warning", "nothing")),
        "notice",
        "How much to log: debug, verbose, notice, warning or nothing.",
        SERVER,
    ),
    Setting(
        "logfile",
        StringKind(),
        "",
        "File to log to (empty: standard error).",
        SERVER,
        mutable=False,
    ),
    Setting(
        "log-format",
        EnumKind(("text", "json")),
        "text",
        "How each log line is written: text (key=value pairs, logfmt) or json (one JSON "
        "object per line, for log shippers).",
        SERVER,
    ),
    Setting(
        "daemonize",
        BoolKind(only=False, why="Narad does not daemonize"),
        False,
        "Must be no: run Narad in the foreground under a supervisor instead.",
        SERVER,
        mutable=False,
    ),
    Setting(
        "pidfile",
        StringKind(),
        "",
        "File the server writes its process ID to once it holds its data dir, and removes"
        " when it stops cleanly (empty: none).",
        SERVER,
        mutable=False,
    ),
    Setting(
        "enable-debug-command",
        EnumKind(("no", "yes", "local")),
        "no",
        "Allow the DEBUG command: no, yes, or local (loopback clients only).",
        SERVER,
        mutable=False,
    ),
    Setting(
        "shutdown-timeout",
        IntKind(1, INT_MAX),
        10,
        "Seconds a stop (SIGTERM, SIGINT) may take: past them the process exits at once,"
        " as kill -9 would, even if a request holds the event loop.",
        SERVER,
    ),
    Setting(
        "proto-max-bulk-len",
        MemoryKind(MB, LLONG_MAX),
        512 * MB,
        "Largest bulk string a client may send.",
        LIMITS,
    ),
    Setting(
        "client-query-buffer-limit",
        MemoryKind(MB, LLONG_MAX),
        GB,
        "Most unparsed input buffered for one client before it is disconnected.",
        LIMITS,
    ),
    Setting(
        "client-output-buffer-limit",
        BufferLimitKind(),
        DEFAULT_OUTPUT_BUFFER_LIMITS,
        "Per client class: <class> <hard> <soft> <soft-seconds>. A client whose pending"
        " replies pass the hard limit, or stay past the soft one for longer than that"
        " (checked once a second), is disconnected; 0 turns a limit off. Unlike Redis"
        " (normal 0 0 0), Narad gives normal clients a 1gb hard limit by default. A"
        " replica's pending output is the journal not yet sent to it plus what its"
        " socket holds (checked ten times a second); every other client is of class"
        " normal, and the pubsub limits are accepted and reported for tools that set"
        " them.",
        LIMITS,
    ),
    Setting(
        "fsync",
        EnumKind(("everysec", "always", "no")),
        "always",
        "When log writes reach the disk: always (before the reply), everysec (within"
        " about a second), or no (when the OS decides). Also named appendfsync.",
        STORAGE,
        aliases=("appendfsync",),
    ),
    Setting(
        "appendonly",
        BoolKind(only=True, why="Narad always writes its log"),
        True,
        "Always yes: every write goes to the log before it is acknowledged.",
        STORAGE,
    ),
    Setting(
        "save",
        SaveKind(),
        "",
        "Accepted and reported for tools that set it; Narad takes no snapshots (the log"
        " is the data).",
        STORAGE,
    ),
    Setting(
        "segment-bytes",
        MemoryKind(KB, LLONG_MAX),
        64 * MB,
        "Start a new log segment before one would pass this size.",
        STORAGE,
    ),
    Setting(
        "journal-segment-bytes",
        MemoryKind(MB, LLONG_MAX),
        64 * MB,
        "Start a new journal segment before one would pass this size. The journal is"
        " deleted a whole segment at a time, once a checkpoint and repl-backlog-size"
        " allow.",
        STORAGE,
    ),
    Setting(
        "segment-ms",
        IntKind(0, LLONG_MAX),
        7 * 24 * 3600 * 1000,
        "Start a new segment once the current one's first record is this many"
        " milliseconds old (0: never).",
        STORAGE,
    ),
    Setting(
        "retention-ms",
        IntKind(0, LLONG_MAX),
        0,
        "Delete sealed segments whose newest record is older than this many"
        " milliseconds (0: keep forever).",
        STORAGE,
    ),
    Setting(
        "retention-bytes",
        MemoryKind(0, LLONG_MAX),
        0,
        "Delete a log's oldest sealed segments beyond this total size (0: unlimited).",
        STORAGE,
    ),
    Setting(
        "queue-retention",
        IntKind(0, LLONG_MAX),
        7 * 24 * 3600 * 1000,
        "Keep the messages consumers acked this many milliseconds, then delete the"
        " sealed segments that hold only such messages this old; a queue's RETENTION"
        " overrides it (0: keep forever). A message no consumer acked is never deleted"
        " by age.",
        STORAGE,
    ),
    Setting(
        "checkpoint-bytes",
        MemoryKind(MB, LLONG_MAX),
        128 * MB,
        "Checkpoint once this much journal was written since the last checkpoint: every"
        " log is fsynced and the journal before the checkpoint is deleted. Bounds how"
        " much journal a restart replays.",
        STORAGE,
    ),
    Setting(
        "checkpoint-seconds",
        IntKind(1, 24 * 3600),
        60,
        "Checkpoint at least this often while commits come in.",
        STORAGE,
    ),
    Setting(
        "stream-node-max-entries",
        IntKind(0, LLONG_MAX),
        100,
        "Entries per stream node: the granularity of approximate (~) trimming.",
        STREAMS,
    ),
    Setting(
        "stream-node-max-bytes",
        MemoryKind(0, LLONG_MAX),
        4096,
        "Accepted and reported for compatibility; ~ trimming counts entries only.",
        STREAMS,
    ),
    Setting(
        "slowlog-log-slower-than",
        IntKind(-1, LLONG_MAX),
        10000,
        "Log commands slower than this many microseconds (-1: none, 0: all).",
        SLOWLOG,
    ),
    Setting(
        "slowlog-max-len",
        IntKind(0, LLONG_MAX),
        128,
        "Entries kept in the slow log; the oldest go first.",
        SLOWLOG,
    ),
    Setting(
        "latency-tracking",
        BoolKind(),
        True,
        "Keep a latency histogram per command, for INFO latencystats.",
        SLOWLOG,
    ),
    Setting(
        "latency-tracking-info-percentiles",
        PercentilesKind(),
        (50.0, 99.0, 99.9),
        'The percentiles INFO latencystats shows, from 0 to 100 ("": none).',
        SLOWLOG,
    ),
    Setting(
        "replicaof",
        ReplicaOfKind(),
        "",
        "Follow the leader at HOST PORT (empty: be a leader). REPLICAOF changes it at"
        " runtime. Also named slaveof.",
        REPLICATION,
        mutable=False,
        aliases=("slaveof",),
    ),
    Setting(
        "masterauth",
        StringKind(),
        "",
        "The password a replica gives its leader (the leader's requirepass).",
        REPLICATION,
        sensitive=True,
    ),
    Setting(
        "masteruser",
        StringKind(),
        "",
        "The user name a replica gives with masterauth (empty: AUTH with the password"
        " alone).",
        REPLICATION,
    ),
    Setting(
        "replica-announce-ip",
        StringKind(),
        "",
        "The address a replica tells its leader to show for it (empty: the one the"
        " leader sees). Also named slave-announce-ip.",
        REPLICATION,
        aliases=("slave-announce-ip",),
    ),
    Setting(
        "replica-announce-port",
        IntKind(0, 65535),
        0,
        "The port a replica tells its leader to show for it (0: its own port). Also"
        " named slave-announce-port.",
        REPLICATION,
        aliases=("slave-announce-port",),
    ),
    Setting(
        "replica-priority",
        IntKind(0, INT_MAX),
        100,
        "Failover preference shown to sentinels: lower goes first, 0 never promoted."
        " Also named slave-priority.",
        REPLICATION,
        aliases=("slave-priority",),
    ),
    Setting(
        "replica-read-only",
        BoolKind(only=True, why="a replica's history is its leader's"),
        True,
        "A replica refuses writes from clients. Also named slave-read-only. Only yes is"
        " accepted: a replica's history is its leader's.",
        REPLICATION,
        aliases=("slave-read-only",),
    ),
    Setting(
        "min-replicas-to-ack",
        IntKind(0, 1000),
        0,
        "Acknowledge a write once this many replicas hold it too, as their fsync policy holds"
        " a commit (0: this node alone); with fewer replicas connected, writes are refused"
        " (NOREPLICAS).",
        REPLICATION,
    ),
    Setting(
        "min-replicas-timeout",
        IntKind(1, INT_MAX),
        10000,
        "Milliseconds a write waits for its replica acks before it answers NOREPL (not"
        " acknowledged: it may or may not survive).",
        REPLICATION,
    ),
    Setting(
        "min-replicas-max-lag",
        IntKind(0, INT_MAX),
        10,
        "A replica counts as connected for min-replicas-to-ack while its last ack is at"
        " most this many seconds old. Also named min-slaves-max-lag.",
        REPLICATION,
        aliases=("min-slaves-max-lag",),
    ),
    Setting(
        "repl-backlog-size",
        MemoryKind(0, LLONG_MAX),
        256 * MB,
        "Journal kept for replicas behind the last checkpoint; a replica further behind"
        " first copies the logs.",
        REPLICATION,
    ),
    Setting(
        "repl-timeout",
        IntKind(1, INT_MAX),
        60,
        "Seconds without traffic after which a replication link counts as broken.",
        REPLICATION,
    ),
    Setting(
        "repl-ping-replica-period",
        IntKind(1, INT_MAX),
        1,
        "Seconds between a leader's pings to an idle replica (its position and epoch)."
        " Also named repl-ping-slave-period.",
        REPLICATION,
        aliases=("repl-ping-slave-period",),
    ),
    Setting(
        "metrics-port",
        PortOrAutoKind(0, 65535),
        AUTO_PORT,
        "The HTTP port of /metrics (Prometheus) and the dashboard (0: off). auto: 8379"
        " when port is 6379, else port + 2000 (tls-port + 2000 when port is 0; off when"
        " both are 0 or the sum passes 65535).",
        METRICS,
        mutable=False,
    ),
    Setting(
        "metrics-bind",
        StringKind(),
        "",
        "Addresses the metrics port listens on, separated by spaces (empty: bind's).",
        METRICS,
        mutable=False,
    ),
    Setting(
        "metrics-per-queue",
        BoolKind(),
        True,
        "One series per queue and per stream in /metrics; no: only totals over all of"
        " them (for nodes with very many queues).",
        METRICS,
    ),
    Setting(
        "metrics-auth",
        EnumKind(("users", "none")),
        "users",
        "users: while clients must log in (requirepass or ACL users), /metrics and the"
        " dashboard ask for HTTP Basic credentials of a user that may run INFO; none:"
        " they are open to whoever reaches the metrics port.",
        METRICS,
    ),
)

_BY_NAME: dict[str, Setting] = {name: s for s in SETTINGS for name in s.names()}


def lookup(name: str) -> Setting | None:
    """The setting called `name` (any case, aliases too), or None."""
    return _BY_NAME.get(name.lower())


def file_lines(setting: Setting, value: object) -> list[str]:
    """The config-file lines that set `setting` to `value`."""
    return [f"{setting.name} {args}" for args in setting.kind.write(value)]
