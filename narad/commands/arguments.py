"""Every command's arguments as COMMAND DOCS gives them (Redis 7.0's shape), written
in a compact mini-syntax, one line per command, and parsed once at import.

redis-cli 7 builds its hints and its `HELP <command>` text from COMMAND DOCS's
`arguments`, so these must match what the command parses. For the Redis commands
Narad answers they are the arguments Redis 7.0 documents (names, types, tokens,
flags and `since` included: tests/server/test_command_docs.py compares them with a
real redis-server's); the Q.* commands follow docs/queues.md and docs/schemas.md.

The mini-syntax, one argument after another, separated by spaces:

    name:type            a plain argument; type is key, string, integer, double,
                         pattern or unix-time (a name may hold ':' or '/': the type is
                         after the last ':')
    TOKEN=name:type      the same, given after the token TOKEN (e.g. LIMIT=count:integer)
    TOKEN                a pure token, named as the token in lower case (NOMKSTREAM)
    TOKEN=name           a pure token with a name of its own ("*"=auto_id)
    name{ ... }          a block: the arguments inside, in order
    name( a | b | ... )  one of the arguments inside (a "oneof")
    TOKEN=name{ ... }, TOKEN=name( ... )    a block or oneof given after a token

A token is an upper-case word, or any text in double quotes ("=", "$"). After an
argument come its flags and versions, in this order, each only when it applies:
`?` optional, `...` multiple, `&` multiple_token (the token is repeated before each
value), `@7.0.0` since, `!5.0.0` deprecated since. A key argument's key_spec_index
counts the key arguments from 0 in order; `#N` right after `:key` gives it
explicitly.
"""

from __future__ import annotations

import re
from typing import Any

# -- the arguments ---------------------------------------------------------------------

# Q.SCHEMA's compatibility modes (docs/schemas.md).
_MODES = (
    "(BACKWARD | BACKWARD_TRANSITIVE | FORWARD | FORWARD_TRANSITIVE | FULL"
    " | FULL_TRANSITIVE | NONE)"
)

SPECS: dict[str, str] = {
    "acl|cat": "categoryname:string?",
    "acl|deluser": "username:string...",
    "acl|dryrun": "username:string command:string arg:string?...",
    "acl|genpass": "bits:integer?",
    "acl|getuser": "username:string",
    "acl|help": "",
    "acl|list": "",
    "acl|load": "",
    "acl|log": "operation(count:integer | RESET)?",
    "acl|save": "",
    "acl|setuser": "username:string rule:string?...",
    "acl|users": "",
    "acl|whoami": "",
    "auth": "username:string?@6.0.0 password:string",
    "bgsave": "SCHEDULE?@3.2.2",
    "client|getname": "",
    "client|help": "",
    "client|id": "",
    "client|info": "",
    "client|kill": (
        "filter(ip:port:string!2.8.12 | new-format(ID=client-id:integer?@2.8.12 |"
        " TYPE=normal_master_slave_pubsub(NORMAL | MASTER@3.2.0 | SLAVE | REPLICA@5.0.0 |"
        " PUBSUB)?@2.8.12 | USER=username:string? | ADDR=ip:port:string? |"
        " LADDR=ip:port:string?@6.2.0 | SKIPME=yes/no:string?)...)"
    ),
    "client|list": (
        "TYPE=normal_master_replica_pubsub(NORMAL | MASTER | REPLICA | PUBSUB)?@5.0.0"
        " ID=id{client-id:integer...}?@6.2.0"
    ),
    "client|no-evict": "enabled(ON | OFF)",
    "client|reply": "on_off_skip(ON | OFF | SKIP)",
    "client|setname": "connection-name:string",
    "command": "",
    "command|count": "",
    "command|docs": "command-name:string?...",
    "command|getkeys": "",
    "command|getkeysandflags": "",
    "command|help": "",
    "command|info": "command-name:string?...",
    "command|list": (
        "FILTERBY=filterby(MODULE=module-name:string | ACLCAT=category:string |"
        " PATTERN=pattern:pattern)?"
    ),
    "config|get": "parameter{parameter:string}...",
    "config|help": "",
    "config|resetstat": "",
    "config|rewrite": "",
    "config|set": "parameter_value{parameter:string value:string}...",
    "dbsize": "",
    "debug": "",
    "del": "key:key...",
    "discard": "",
    "echo": "message:string",
    "exec": "",
    "exists": "key:key...",
    "flushall": "async(ASYNC@4.0.0 | SYNC@6.2.0)?",
    "flushdb": "async(ASYNC@4.0.0 | SYNC@6.2.0)?",
    "function|flush": "async(ASYNC | SYNC)?",
    "function|list": "LIBRARYNAME=library-name-pattern:string? WITHCODE?",
    "hello": (
        "arguments{protover:integer AUTH=username_password{username:string password:string}?"
        " SETNAME=clientname:string?}?"
    ),
    "info": "section:string?...",
    "keys": "pattern:pattern",
    "lastsave": "",
    "latency|doctor": "",
    "latency|graph": "event:string",
    "latency|help": "",
    "latency|histogram": "command:string?...",
    "latency|history": "event:string",
    "latency|latest": "",
    "latency|reset": "event:string?...",
    "memory|doctor": "",
    "memory|help": "",
    "memory|usage": "key:key SAMPLES=count:integer?",
    "monitor": "",
    "multi": "",
    "ping": "message:string?",
    "psync": "replicationid:string offset:integer",
    "quit": "",
    "rename": "key:key newkey:key",
    "renamenx": "key:key newkey:key",
    "replconf": "",
    "replicaof": "args(host-port{host:string port:integer} | no-one{NO ONE})",
    "reset": "",
    "role": "",
    "save": "",
    "scan": "cursor:integer MATCH=pattern:pattern? COUNT=count:integer? TYPE=type:string?@6.0.0",
    "select": "index:integer",
    "shutdown": "nosave_save(NOSAVE | SAVE)? NOW?@7.0.0 FORCE?@7.0.0 ABORT?@7.0.0",
    "slaveof": "args(host-port{host:string port:integer} | no-one{NO ONE})",
    "slowlog|get": "count:integer?",
    "slowlog|help": "",
    "slowlog|len": "",
    "slowlog|reset": "",
    "swapdb": "index1:integer index2:integer",
    "time": "",
    "type": "key:key",
    "unlink": "key:key...",
    "unwatch": "",
    "wait": "numreplicas:integer timeout:integer",
    "watch": "key:key...",
    "xack": "key:key group:string id:string...",
    "xadd": (
        'key:key NOMKSTREAM?@6.2.0 condition(KEEPREF | DELREF | ACKED)?@8.2.0'
        ' trim{strategy(MAXLEN | MINID@6.2.0) operator("="=equal |'
        ' "~"=approximately)? threshold:string LIMIT=count:integer?@6.2.0}?'
        ' id_or_auto("*"=auto_id | id:string) field_value{field:string value:string}...'
    ),
    "xautoclaim": (
        "key:key group:string consumer:string min-idle-time:string start:string"
        " COUNT=count:integer? JUSTID?"
    ),
    "xclaim": (
        "key:key group:string consumer:string min-idle-time:string id:string..."
        " IDLE=ms:integer? TIME=unix-time-milliseconds:unix-time? RETRYCOUNT=count:integer?"
        " FORCE? JUSTID? LASTID=id:string?"
    ),
    "xdel": "key:key id:string...",
    # Redis 8.2, 8.8 (docs/streams.md).
    "xdelex": "key:key condition(KEEPREF | DELREF | ACKED)? IDS=ids{numids:integer id:string...}",
    "xackdel": (
        "key:key group:string condition(KEEPREF | DELREF | ACKED)?"
        " IDS=ids{numids:integer id:string...}"
    ),
    "xnack": (
        "key:key group:string mode(SILENT | FAIL | FATAL) IDS=ids{numids:integer id:string...}"
        " RETRYCOUNT=retrycount:integer? FORCE?"
    ),
    "xgroup|create": (
        'key:key groupname:string id(id:string | "$"=new_id) MKSTREAM?'
        " ENTRIESREAD=entries_read:integer?"
    ),
    "xgroup|createconsumer": "key:key groupname:string consumername:string",
    "xgroup|delconsumer": "key:key groupname:string consumername:string",
    "xgroup|destroy": "key:key groupname:string",
    "xgroup|help": "",
    "xgroup|setid": (
        'key:key groupname:string id(id:string | "$"=new_id)'
        " ENTRIESREAD=entries_read:integer?"
    ),
    "xinfo|consumers": "key:key groupname:string",
    "xinfo|groups": "key:key",
    "xinfo|help": "",
    "xinfo|stream": "key:key FULL=full{COUNT=count:integer?}?",
    "xlen": "key:key",
    "xpending": (
        "key:key group:string filters{IDLE=min-idle-time:integer?@6.2.0 start:string"
        " end:string count:integer consumer:string?}?"
    ),
    "xrange": "key:key start:string end:string COUNT=count:integer?",
    "xread": (
        "COUNT=count:integer? BLOCK=milliseconds:integer? MAXCOUNT=maxcount:integer?@8.10.0"
        " MAXSIZE=maxsize:integer?@8.10.0 STREAMS=streams{key:key... id:string...}"
    ),
    "xreadgroup": (
        "GROUP=group_consumer{group:string consumer:string} COUNT=count:integer?"
        " BLOCK=milliseconds:integer? MAXCOUNT=maxcount:integer?@8.10.0"
        " MAXSIZE=maxsize:integer?@8.10.0 NOACK? CLAIM=min-idle-time:integer?@8.4.0"
        " STREAMS=streams{key:key... id:string...}"
    ),
    "xrevrange": "key:key end:string start:string COUNT=count:integer?",
    "xsetid": (
        "key:key last-id:string ENTRIESADDED=entries_added:integer?@7.0.0"
        " MAXDELETEDID=max_deleted_entry_id:string?@7.0.0"
    ),
    "xtrim": (
        'key:key trim{strategy(MAXLEN | MINID@6.2.0) operator("="=equal | "~"=approximately)?'
        " threshold:string LIMIT=count:integer?@6.2.0} condition(KEEPREF | DELREF | ACKED)?@8.2.0"
    ),
    # Redis 7.2's, which Narad answers as 7.2 does.
    "client|setinfo": "attr(LIB-NAME=libname:string | LIB-VER=libver:string)",
    "client|no-touch": "enabled(ON | OFF)",
    "waitaof": "numlocal:integer numreplicas:integer timeout:integer",
    # Narad's own: a sentinel's failover steps (docs/failover.md).
    "fence": "epoch:integer DRAIN?",
    "promote": "epoch:integer",
    # Queues (docs/queues.md). Options come in any order; they are listed in the
    # order of the docs.
    "q.create": (
        "queue:key VISIBILITY=ms:integer? MAXRECEIVES=count:integer? DLQ=dlq:key?"
        " DELAY=ms:integer? RETENTION=ms:integer? MAXBYTES=bytes:integer?"
        " DEDUPWINDOW=ms:integer? NX?"
    ),
    "q.drop": "queue:key FORCE?",
    "q.config": (
        "queue:key operation(get{GET name:string?}"
        " | set{SET name_value{name:string value:string}...})"
    ),
    "q.list": "MATCH=pattern:pattern?",
    "q.push": "queue:key DELAY=ms:integer? DEDUP=dedup-key:string? payload:string...",
    "q.pop": "queue:key COUNT=count:integer? VISIBILITY=ms:integer? BLOCK=ms:integer?",
    "q.ack": "queue:key receipt:string...",
    "q.nack": "queue:key receipt:string DELAY=ms:integer?",
    "q.touch": "queue:key receipt:string ms:integer",
    "q.consume": "queue:key PREFETCH=count:integer? VISIBILITY=ms:integer?",
    "q.cancel": "",
    "q.subscribe": "queue:key source:key FROM=from(EARLIEST | LATEST | id:string)?",
    "q.unsubscribe": "queue:key source:key",
    "q.seek": "queue:key position(EARLIEST | LATEST | id:string | TIME=ms:integer)",
    "q.redrive": "dlq:key TO=queue:key? COUNT=count:integer?",
    "q.peek": "queue:key COUNT=count:integer?",
    "q.stats": "queue:key",
    # Schemas (docs/schemas.md).
    "q.schema|set": f"key:key schema-json:string COMPAT=mode{_MODES}? FIELD=field:string?",
    "q.schema|get": "key:key version:integer?",
    "q.schema|versions": "key:key",
    "q.schema|check": f"key:key schema-json:string COMPAT=mode{_MODES}?",
    "q.schema|compat": f"key:key mode{_MODES}?",
    "q.schema|drop": "key:key",
    "q.schema|help": "",
}

# What COMMAND DOCS says of a command beyond its arguments, as Redis 7.0 does.
DOC_FLAGS: dict[str, tuple[str, ...]] = {
    "debug": ("syscmd",),
    "replconf": ("syscmd",),
    "slaveof": ("deprecated",),
}
DEPRECATED: dict[str, tuple[str, str]] = {"slaveof": ("5.0.0", "`REPLICAOF`")}


# -- key specs and tips (COMMAND INFO) ---------------------------------------------------

# Each command's key specs, as Redis 7.0 gives them; one string per spec, specs
# separated by ";": the flags (RO, RW, OW, RM, access, update, insert, delete,
# incomplete), then where the search begins (index:I, or keyword:WORD,STARTFROM),
# then how keys are found from there (range:LASTKEY,KEYSTEP,LIMIT, or
# keynum:KEYNUMIDX,FIRSTKEY,KEYSTEP). A command not listed has one spec made from its
# table entry's key positions and access (narad/commands/table.py).
KEY_SPECS: dict[str, str] = {
    "del": "RM delete index:1 range:-1,1,0",
    "exists": "RO index:1 range:-1,1,0",
    "rename": "RW access delete index:1 range:0,1,0; OW update index:2 range:0,1,0",
    "renamenx": "RW access delete index:1 range:0,1,0; OW insert index:2 range:0,1,0",
    "type": "RO index:1 range:0,1,0",
    "unlink": "RM delete index:1 range:-1,1,0",
    "watch": "RO index:1 range:-1,1,0",
    "xack": "RW update index:1 range:0,1,0",
    "xadd": "RW update index:1 range:0,1,0",
    "xautoclaim": "RW delete index:1 range:0,1,0",
    "xclaim": "RW update index:1 range:0,1,0",
    "xdel": "RW delete index:1 range:0,1,0",
    "xgroup|create": "RW insert index:2 range:0,1,0",
    "xgroup|createconsumer": "RW insert index:2 range:0,1,0",
    "xgroup|delconsumer": "RW delete index:2 range:0,1,0",
    "xgroup|destroy": "RW delete index:2 range:0,1,0",
    "xgroup|setid": "RW update index:2 range:0,1,0",
    "xinfo|consumers": "RO access index:2 range:0,1,0",
    "xinfo|groups": "RO access index:2 range:0,1,0",
    "xinfo|stream": "RO access index:2 range:0,1,0",
    "memory|usage": "RO index:2 range:0,1,0",
    "xlen": "RO index:1 range:0,1,0",
    "xpending": "RO access index:1 range:0,1,0",
    "xrange": "RO access index:1 range:0,1,0",
    "xread": "RO access keyword:STREAMS,1 range:-1,1,2",
    "xreadgroup": "RO access keyword:STREAMS,4 range:-1,1,2",
    "xrevrange": "RO access index:1 range:0,1,0",
    "xsetid": "RW update index:1 range:0,1,0",
    "xtrim": "RW delete index:1 range:0,1,0",
    # Narad's: the options that name a key (Q.CREATE's DLQ, Q.REDRIVE's TO). Without
    # TO a redrive writes to the queues its letters came from, named by no argument.
    "q.create": "RW update index:1 range:0,1,0; RW update keyword:DLQ,2 range:0,1,0",
    "q.redrive": "RW update index:1 range:0,1,0; RW update incomplete keyword:TO,2 range:0,1,0",
    "q.subscribe": "RW update index:1 range:0,1,0; RW update index:2 range:0,1,0",
    "q.unsubscribe": "RW update index:1 range:0,1,0; RW update index:2 range:0,1,0",
}

# COMMAND INFO's tips (Redis 7.0's, for cluster clients: how to route and merge).
TIPS: dict[str, tuple[str, ...]] = {
    "client|info": ("nondeterministic_output",),
    "client|list": ("nondeterministic_output",),
    "command": ("nondeterministic_output_order",),
    "command|docs": ("nondeterministic_output_order",),
    "command|info": ("nondeterministic_output_order",),
    "command|list": ("nondeterministic_output_order",),
    "config|set": ("request_policy:all_nodes", "response_policy:all_succeeded"),
    "latency|doctor": (
        "nondeterministic_output", "request_policy:all_nodes", "response_policy:special",
    ),
    "latency|graph": (
        "nondeterministic_output", "request_policy:all_nodes", "response_policy:special",
    ),
    "latency|histogram": (
        "nondeterministic_output", "request_policy:all_nodes", "response_policy:special",
    ),
    "latency|history": (
        "nondeterministic_output", "request_policy:all_nodes", "response_policy:special",
    ),
    "latency|latest": (
        "nondeterministic_output", "request_policy:all_nodes", "response_policy:special",
    ),
    "latency|reset": ("request_policy:all_nodes", "response_policy:all_succeeded"),
    "memory|doctor": (
        "nondeterministic_output", "request_policy:all_shards", "response_policy:special",
    ),
    "dbsize": ("request_policy:all_shards", "response_policy:agg_sum"),
    "del": ("request_policy:multi_shard", "response_policy:agg_sum"),
    "exists": ("request_policy:multi_shard", "response_policy:agg_sum"),
    "flushall": ("request_policy:all_shards", "response_policy:all_succeeded"),
    "flushdb": ("request_policy:all_shards", "response_policy:all_succeeded"),
    "function|flush": ("request_policy:all_shards", "response_policy:all_succeeded"),
    "function|list": ("nondeterministic_output_order",),
    "info": ("nondeterministic_output", "request_policy:all_shards", "response_policy:special"),
    "keys": ("request_policy:all_shards", "nondeterministic_output_order"),
    "lastsave": ("nondeterministic_output",),
    "ping": ("request_policy:all_shards", "response_policy:all_succeeded"),
    "scan": ("nondeterministic_output", "request_policy:special"),
    "slowlog|get": ("request_policy:all_nodes", "nondeterministic_output"),
    "slowlog|len": (
        "request_policy:all_nodes",
        "response_policy:agg_sum",
        "nondeterministic_output",
    ),
    "slowlog|reset": ("request_policy:all_nodes", "response_policy:all_succeeded"),
    "time": ("nondeterministic_output",),
    "unlink": ("request_policy:multi_shard", "response_policy:agg_sum"),
    "wait": ("request_policy:all_shards", "response_policy:agg_min"),
    "xadd": ("nondeterministic_output",),
    "xautoclaim": ("nondeterministic_output",),
    "xclaim": ("nondeterministic_output",),
    "xinfo|consumers": ("nondeterministic_output",),
    "xpending": ("nondeterministic_output",),
    "xtrim": ("nondeterministic_output",),
}


def parse_key_spec(text: str) -> dict[str, Any]:
    """One key spec of KEY_SPECS as COMMAND INFO's map (see KEY_SPECS's comment)."""
    *flags, begin, find = text.split()
    kind, _, where = begin.partition(":")
    if kind == "index":
        begin_search = {"type": "index", "spec": {"index": int(where)}}
    elif kind == "keyword":
        word, start = where.split(",")
        begin_search = {"type": "keyword", "spec": {"keyword": word, "startfrom": int(start)}}
    else:
        raise SpecError(f"{text!r}: unknown begin_search {kind!r}")
    kind, _, numbers = find.partition(":")
    a, b, c = (int(n) for n in numbers.split(","))
    if kind == "range":
        find_keys = {"type": "range", "spec": {"lastkey": a, "keystep": b, "limit": c}}
    elif kind == "keynum":
        find_keys = {"type": "keynum", "spec": {"keynumidx": a, "firstkey": b, "keystep": c}}
    else:
        raise SpecError(f"{text!r}: unknown find_keys {kind!r}")
    return {"flags": flags, "begin_search": begin_search, "find_keys": find_keys}


# -- the mini-syntax -------------------------------------------------------------------

TYPES = frozenset({"key", "string", "integer", "double", "pattern", "unix-time"})

_HEAD = re.compile(
    r"""(?P<token>[A-Z][A-Z0-9_-]*|"[^"]+")?(?P<eq>=)?"""
    r"(?P<name>[a-z][a-z0-9_:/-]*)?(?:#(?P<index>[0-9]+))?(?P<open>[{(])?"
)
_FLAGS = re.compile(
    r"(?P<optional>\?)?(?P<multiple>\.\.\.)?(?P<multiple_token>&)?"
    r"(?:@(?P<since>[0-9.]+))?(?:!(?P<deprecated>[0-9.]+))?"
)
_CLOSE = {"{": "}", "(": ")"}


class SpecError(ValueError):
    """A line of SPECS that does not follow the mini-syntax (a bug: raised at import)."""


class _Parser:
    """Reads one spec line into Redis's argument maps (plain dicts, in Redis's field
    order: name, type, key_spec_index, token, since, deprecated_since, flags,
    arguments)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.keys = 0  # key arguments seen so far: the next key_spec_index

    def parse(self) -> list[dict[str, Any]]:
        return self._items(None)

    def _items(self, closer: str | None) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        while True:
            while self.pos < len(self.text) and self.text[self.pos] == " ":
                self.pos += 1
            if self.pos == len(self.text):
                if closer is not None:
                    raise SpecError(f"{self.text!r}: missing {closer!r}")
                return items
            char = self.text[self.pos]
            if char == closer:
                self.pos += 1
                return items
            if char == "|" and closer == ")" and items:
                self.pos += 1
                continue
            items.append(self._item())

    def _item(self) -> dict[str, Any]:
        head = _HEAD.match(self.text, self.pos)
        assert head is not None  # every group of the pattern is optional
        if head.end() == self.pos:
            raise SpecError(f"{self.text!r}: cannot read from column {self.pos}")
        self.pos = head.end()
        token = head["token"].strip('"') if head["token"] else None
        name, opener = head["name"], head["open"]
        arg: dict[str, Any] = {}
        if opener is not None:
            if name is None:
                raise SpecError(f"{self.text!r}: a block or oneof needs a name")
            arg["name"] = name
            arg["type"] = "block" if opener == "{" else "oneof"
        elif token is not None and (name is None or ":" not in name):
            arg["name"] = name or token.lower()
            arg["type"] = "pure-token"
        else:
            if name is None or ":" not in name:
                raise SpecError(f"{self.text!r}: {name!r} has no type")
            arg["name"], arg["type"] = name.rsplit(":", 1)
            if arg["type"] not in TYPES:
                raise SpecError(f"{self.text!r}: unknown type {arg['type']!r}")
        if arg["type"] == "key":
            arg["key_spec_index"] = self.keys if head["index"] is None else int(head["index"])
            self.keys += 1
        elif head["index"] is not None:
            raise SpecError(f"{self.text!r}: only a key has a key_spec_index")
        if token is not None:
            arg["token"] = token
        inner = self._items(_CLOSE[opener]) if opener is not None else None
        flags = _FLAGS.match(self.text, self.pos)
        assert flags is not None  # every group of the pattern is optional
        self.pos = flags.end()
        if flags["since"]:
            arg["since"] = flags["since"]
        if flags["deprecated"]:
            arg["deprecated_since"] = flags["deprecated"]
        shown = [f for f in ("optional", "multiple", "multiple_token") if flags[f]]
        if shown:
            arg["flags"] = shown
        if inner is not None:
            if not inner:
                raise SpecError(f"{self.text!r}: {arg['name']!r} is empty")
            arg["arguments"] = inner
        return arg


def parse(text: str) -> list[dict[str, Any]]:
    """The argument maps of one spec line (see the module's header)."""
    return _Parser(text).parse()


ARGUMENTS: dict[str, list[dict[str, Any]]] = {name: parse(text) for name, text in SPECS.items()}
KEY_SPEC_MAPS: dict[str, list[dict[str, Any]]] = {
    name: [parse_key_spec(part) for part in text.split(";")] for name, text in KEY_SPECS.items()
}
