"""ACL users on a real server (docs/security.md): log-in with users, command,
category and key permissions, keys named in options, the ACL log, the ACL file and
`user` lines, the default user, and redis-py and redis-cli as clients."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.server.raw import Raw
from tests.servers import NaradProcess

QUEUE_USER = ["on", ">qpw", "~jobs:*", "+@queue"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NaradProcess]:
    folder = tmp_path_factory.mktemp("acl")
    aclfile = folder / "users.acl"
    aclfile.write_text("")
    process = NaradProcess(folder, ["--aclfile", str(aclfile), "--enable-debug-command", "yes"])
    process.start()
    yield process
    process.stop()


@pytest.fixture
def admin(server: NaradProcess) -> Iterator[redis.Redis]:
    client = server.client()
    client.execute_command("ACL", "LOG", "RESET")
    client.flushall()
    yield client
    for name in client.execute_command("ACL", "USERS"):
        if name != b"default":
            client.execute_command("ACL", "DELUSER", name)
    client.execute_command(
        "ACL", "SETUSER", "default", "reset", "on", "nopass", "~*", "&*", "+@all"
    )
    client.close()


def as_user(server: NaradProcess, user: str, password: str, **kwargs: object) -> redis.Redis:
    return server.client(username=user, password=password, **kwargs)


def nopermission(call) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(redis.exceptions.NoPermissionError) as info:
        call()
    return str(info.value)


def test_a_queue_user_reaches_its_queues_only(server: NaradProcess, admin: redis.Redis) -> None:
    admin.execute_command("ACL", "SETUSER", "worker", *QUEUE_USER)
    for name in ("other", "jobs:dlq", "jobs:a"):
        admin.execute_command("Q.CREATE", name)
    worker = as_user(server, "worker", "qpw")
    worker.execute_command("Q.PUSH", "jobs:a", "hello")
    popped = worker.execute_command("Q.POP", "jobs:a")
    assert popped[0][b"payload"] == b"hello"
    assert nopermission(lambda: worker.execute_command("Q.PUSH", "other", "x")) == (
        "No permissions to access a key"
    )
    for argv, name in [
        (["CONFIG", "GET", "port"], "config|get"),
        (["FENCE", "1"], "fence"),
        (["PSYNC", "?", "-1"], "psync"),
        (["DEBUG", "SLEEP", "0"], "debug"),
        (["XADD", "jobs:a", "*", "f", "v"], "xadd"),
        (["ACL", "WHOAMI"], "acl|whoami"),
    ]:
        text = nopermission(lambda argv=argv: worker.execute_command(*argv))
        assert text == f"User worker has no permissions to run the '{name}' command"
    # Queues named in options are keys too: a DLQ, a subscription's source, TO.
    for argv in [
        ["Q.CREATE", "jobs:b", "DLQ", "other"],
        ["Q.CONFIG", "jobs:a", "SET", "dlq", "other"],
        ["Q.SUBSCRIBE", "jobs:a", "other"],
        ["Q.REDRIVE", "jobs:dlq", "TO", "other"],
        ["Q.REDRIVE", "jobs:dlq"],  # back to each letter's origin: any key
    ]:
        assert nopermission(lambda argv=argv: worker.execute_command(*argv)) == (
            "No permissions to access a key"
        )
    assert admin.execute_command("Q.CONFIG", "jobs:a", "GET", "dlq") == {b"dlq": b""}
    assert admin.exists("jobs:b") == 0
    worker.execute_command("Q.CREATE", "jobs:b", "DLQ", "jobs:dlq")
    assert worker.execute_command("Q.REDRIVE", "jobs:dlq", "TO", "jobs:b") == 0
    log = _log(server.port)
    seen = {(e[b"reason"], e[b"object"]) for e in log}
    assert (b"key", b"other") in seen and (b"key", b"*") in seen
    assert {(b"command", n) for n in (b"config|get", b"fence", b"psync", b"debug")} <= seen
    assert all(e[b"username"] == b"worker" for e in log)
    worker.close()


def _entry(raw: object) -> dict[bytes, object]:
    if isinstance(raw, dict):
        return raw
    assert isinstance(raw, list)
    return dict(zip(raw[::2], raw[1::2], strict=True))


def _getuser(client: redis.Redis, name: str, password: str = "") -> dict[bytes, object]:
    port = client.connection_pool.connection_kwargs["port"]
    with Raw(port) as raw:
        if password:
            raw.call("AUTH", password)
        return _entry(raw.call("ACL", "GETUSER", name))


def _log(port: int, count: int = 100) -> list[dict[bytes, object]]:
    """ACL LOG's entries, but those of CLIENT SETINFO, which redis-py sends at connect
    (its errors ignored) and which a user without +client|setinfo is refused."""
    with Raw(port) as raw:
        entries = map(_entry, raw.call("ACL", "LOG", count))
    return [e for e in entries if e[b"object"] != b"client|setinfo"]


def test_acl_log_entries_as_redis(server: NaradProcess, admin: redis.Redis) -> None:
    admin.execute_command("ACL", "SETUSER", "worker", *QUEUE_USER)
    worker = as_user(server, "worker", "qpw")
    for _ in range(3):
        nopermission(lambda: worker.execute_command("Q.STATS", "secret"))
    with Raw(server.port) as raw:
        raw.call("AUTH", "worker", "nope")
    auth, key = _log(server.port)
    assert auth[b"reason"] == b"auth" and auth[b"username"] == b"worker"
    assert auth[b"context"] == b"toplevel" and auth[b"object"] == b"AUTH"
    assert key[b"count"] == 3 and key[b"reason"] == b"key" and key[b"object"] == b"secret"
    assert list(key) == [
        b"count", b"reason", b"context", b"object", b"username", b"age-seconds",
        b"client-info", b"entry-id", b"timestamp-created", b"timestamp-last-updated",
    ]
    assert b"user=worker" in key[b"client-info"]
    admin.config_set("acllog-max-len", "1")
    assert len(admin.execute_command("ACL", "LOG")) == 1  # the newest kept
    admin.config_set("acllog-max-len", "128")
    assert admin.execute_command("ACL", "LOG", "RESET") == b"OK"
    assert admin.execute_command("ACL", "LOG") == []
    worker.close()


def test_wrongpass_and_log_in_forms(server: NaradProcess, admin: redis.Redis) -> None:
    admin.execute_command("ACL", "SETUSER", "worker", *QUEUE_USER)
    with Raw(server.port) as raw:
        assert raw.call("AUTH", "worker", "bad") == (
            "error", "WRONGPASS invalid username-password pair or user is disabled."
        )
        assert raw.call("AUTH", "worker", "qpw") == b"OK"
        assert raw.call("HELLO", "2", "AUTH", "worker", "bad") == (
            "error", "WRONGPASS invalid username-password pair or user is disabled."
        )
    with pytest.raises(redis.exceptions.AuthenticationError):
        as_user(server, "worker", "bad").ping()
    with pytest.raises(redis.exceptions.AuthenticationError):
        as_user(server, "nobody", "qpw").ping()
    resp3 = as_user(server, "worker", "qpw", protocol=3)  # HELLO 3 AUTH worker qpw
    assert resp3.execute_command("Q.LIST") == []
    resp2 = as_user(server, "worker", "qpw")  # AUTH worker qpw
    assert resp2.execute_command("Q.LIST") == []
    admin.execute_command("ACL", "SETUSER", "worker", "off")
    with pytest.raises(redis.exceptions.AuthenticationError):
        as_user(server, "worker", "qpw").ping()
    # As in Redis, a user turned off keeps the connections it has.
    assert resp2.execute_command("Q.LIST") == []
    assert b"user=worker" in admin.execute_command("CLIENT", "LIST")
    resp2.close()
    resp3.close()


def test_redis_cli_user_and_pass(server: NaradProcess, admin: redis.Redis) -> None:
    admin.execute_command("ACL", "SETUSER", "worker", *QUEUE_USER, "+acl|whoami")
    out = subprocess.run(
        ["redis-cli", "-p", str(server.port), "--user", "worker", "--pass", "qpw",
         "--no-auth-warning", "ACL", "WHOAMI"],
        capture_output=True, text=True, check=True, timeout=20,
    )
    assert out.stdout.strip() == "worker"
    out = subprocess.run(
        ["redis-cli", "-p", str(server.port), "--user", "worker", "--pass", "qpw",
         "--no-auth-warning", "CONFIG", "GET", "port"],
        capture_output=True, text=True, timeout=20,
    )
    assert "NOPERM User worker has no permissions to run the 'config|get' command" in out.stdout


def test_setuser_rules_and_descriptions(admin: redis.Redis) -> None:
    assert admin.execute_command("ACL", "LIST") == [
        b"user default on nopass sanitize-payload ~* &* +@all"
    ]
    admin.execute_command(
        "ACL", "SETUSER", "ops", "on", ">a", ">b", "<a", "%R~logs:*", "%W~out:*", "~jobs:*",
        "&chan*", "+@all", "-@dangerous", "+config|get", "-q.drop", "+select|0",
    )
    line = admin.execute_command("ACL", "LIST")[1].decode()
    digest = "3e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d"  # sha256("b")
    assert line == (
        f"user ops on sanitize-payload #{digest} %R~logs:* %W~out:* ~jobs:* resetchannels "
        "&chan* +@all -@dangerous +config|get -q.drop +select|0"
    )
    got = _getuser(admin, "ops")
    assert got[b"flags"] == [b"on", b"sanitize-payload"]
    assert got[b"passwords"] == [digest.encode()]
    assert got[b"keys"] == b"%R~logs:* %W~out:* ~jobs:*"
    assert got[b"channels"] == b"&chan*"
    assert admin.execute_command("ACL", "GETUSER", "nobody") is None
    # A later rule for the same command replaces the earlier one.
    admin.execute_command("ACL", "SETUSER", "ops", "-config|get", "reset")
    assert admin.execute_command("ACL", "LIST")[1] == (
        b"user ops off sanitize-payload resetchannels -@all"
    )
    errors = {
        "bogus": "Syntax error",
        "+nosuch": "Unknown command or category name in ACL",
        "+@nosuch": "Unknown command or category name in ACL",
        "<never": "The password you are trying to remove from the user does not exist",
        "#abc": "The password hash must be exactly 64 characters and contain only lowercase "
                "hexadecimal characters",
        "+config|get|x": "Allowing first-arg of a subcommand is not supported",
        "%X~k": "Syntax error",
    }
    for rule, reason in errors.items():
        with pytest.raises(redis.ResponseError) as info:
            admin.execute_command("ACL", "SETUSER", "ops", "on", rule)
        assert str(info.value) == f"Error in ACL SETUSER modifier '{rule}': {reason}"
    with pytest.raises(redis.ResponseError, match="Adding a pattern after the"):
        admin.execute_command("ACL", "SETUSER", "ops", "allkeys", "~x")
    # A refused SETUSER changed nothing, the `on` before the bad rule included.
    assert admin.execute_command("ACL", "LIST")[1].startswith(b"user ops off ")
    with pytest.raises(redis.ResponseError, match="The 'default' user cannot be removed"):
        admin.execute_command("ACL", "DELUSER", "ops", "default")
    assert admin.execute_command("ACL", "DELUSER", "ops", "nobody") == 1


def test_categories_and_dryrun(admin: redis.Redis) -> None:
    cats = admin.execute_command("ACL", "CAT")
    assert cats[:3] == [b"keyspace", b"read", b"write"]
    assert {b"queue", b"schema", b"replication", b"sentinel"} <= set(cats)
    assert set(admin.execute_command("ACL", "CAT", "replication")) == {
        b"psync", b"replconf", b"fence", b"promote", b"replicaof", b"slaveof"
    }
    sentinel = set(admin.execute_command("ACL", "CAT", "sentinel"))
    assert {b"ping", b"info", b"client|list", b"fence", b"promote", b"replicaof"} <= sentinel
    assert b"q.schema|set" in admin.execute_command("ACL", "CAT", "schema")
    assert b"q.push" in admin.execute_command("ACL", "CAT", "queue")
    with pytest.raises(redis.ResponseError, match="Unknown category 'nosuch'"):
        admin.execute_command("ACL", "CAT", "nosuch")
    admin.execute_command(
        "ACL", "SETUSER", "reader", "on", "nopass", "%R~r:*", "+@read", "+@stream"
    )
    assert admin.execute_command("ACL", "DRYRUN", "reader", "XRANGE", "r:1", "-", "+") == b"OK"
    assert admin.execute_command("ACL", "DRYRUN", "reader", "XADD", "r:1", "*", "f", "v") == (
        b"User reader has no permissions to access the 'r:1' key"
    )
    assert admin.execute_command(
        "ACL", "DRYRUN", "reader", "XREAD", "STREAMS", "r:1", "w:1", "0", "0"
    ) == b"User reader has no permissions to access the 'w:1' key"
    assert admin.execute_command("ACL", "DRYRUN", "reader", "CONFIG", "GET", "x") == (
        b"User reader has no permissions to run the 'config|get' command"
    )
    with pytest.raises(redis.ResponseError, match="User 'nobody' not found"):
        admin.execute_command("ACL", "DRYRUN", "nobody", "PING")
    with pytest.raises(redis.ResponseError, match="Command 'nosuch' not found"):
        admin.execute_command("ACL", "DRYRUN", "reader", "nosuch")
    assert len(admin.execute_command("ACL", "GENPASS")) == 64
    assert len(admin.execute_command("ACL", "GENPASS", "5")) == 2


def test_getkeys_finds_keys_in_options(server: NaradProcess) -> None:
    with Raw(server.port) as raw:
        def getkeys(*argv: str) -> object:
            return raw.call("COMMAND", "GETKEYS", *argv)

        assert getkeys("Q.CREATE", "a", "DLQ", "b") == [b"a", b"b"]
        assert getkeys("Q.CONFIG", "a", "SET", "dlq", "b") == [b"a", b"b"]
        assert getkeys("Q.REDRIVE", "d", "TO", "t") == [b"d", b"t"]
        assert getkeys("Q.SUBSCRIBE", "q", "s") == [b"q", b"s"]
        assert getkeys("XREADGROUP", "GROUP", "g", "c", "STREAMS", "a", "b", ">", ">") == [
            b"a", b"b"
        ]
        assert getkeys("XREAD", "BLOCK", "1", "STREAMS", "a", "0") == [b"a"]
        flags = raw.call("COMMAND", "GETKEYSANDFLAGS", "Q.CONFIG", "a", "GET")
        assert flags == [[b"a", [b"RO", b"access"]]]


def test_multi_is_checked_when_queued_and_at_exec(server: NaradProcess, admin: redis.Redis) -> None:
    admin.execute_command("ACL", "SETUSER", "worker", *QUEUE_USER, "+@transaction")
    admin.execute_command("Q.CREATE", "jobs:m")
    worker = as_user(server, "worker", "qpw")
    with Raw(server.port) as raw:
        assert raw.call("AUTH", "worker", "qpw") == b"OK"
        assert raw.call("MULTI") == b"OK"
        assert raw.call("Q.PUSH", "jobs:m", "a") == b"QUEUED"
        assert raw.call("Q.PUSH", "other", "b") == (
            "error", "NOPERM No permissions to access a key"
        )
        assert raw.call("EXEC") == (
            "error", "EXECABORT Transaction discarded because of previous errors."
        )
    log = _log(server.port)[0]
    assert log[b"context"] == b"multi" and log[b"object"] == b"other"
    assert admin.xlen("jobs:m") == 0
    with Raw(server.port) as raw:
        assert raw.call("AUTH", "worker", "qpw") == b"OK"
        assert raw.call("MULTI") == b"OK"
        assert raw.call("Q.PUSH", "jobs:m", "x") == b"QUEUED"
        assert raw.call("Q.STATS", "jobs:m") == b"QUEUED"
        admin.execute_command("ACL", "SETUSER", "worker", "-q.stats")
        replies = raw.call("EXEC")
    assert isinstance(replies[0], bytes)
    assert replies[1] == (
        "error",
        "NOPERM ACLs rules changed between the moment the transaction was accumulated and "
        "the EXEC call. This command is no longer allowed for the following reason: no "
        "permission to execute the command or subcommand",
    )
    worker.close()


def test_deluser_and_load_close_the_users_connections(
    server: NaradProcess, admin: redis.Redis
) -> None:
    admin.execute_command("ACL", "SETUSER", "worker", *QUEUE_USER)
    worker = as_user(server, "worker", "qpw")
    assert worker.execute_command("Q.LIST") == []
    assert admin.execute_command("ACL", "DELUSER", "worker") == 1
    with pytest.raises(redis.exceptions.ConnectionError):
        worker.execute_command("Q.LIST")
    worker.close()


def test_acl_save_and_load_round_trip(server: NaradProcess, admin: redis.Redis) -> None:
    aclfile = server.folder / "users.acl"
    admin.execute_command("ACL", "SETUSER", "worker", *QUEUE_USER)
    listed = admin.execute_command("ACL", "LIST")
    assert admin.execute_command("ACL", "SAVE") == b"OK"
    assert aclfile.read_bytes() == b"".join(line + b"\n" for line in listed)
    admin.execute_command("ACL", "DELUSER", "worker")
    admin.execute_command("ACL", "SETUSER", "gone", "on", "nopass")
    assert admin.execute_command("ACL", "LOAD") == b"OK"
    assert admin.execute_command("ACL", "LIST") == listed
    worker = Raw(server.port)
    assert worker.call("AUTH", "worker", "qpw") == b"OK"
    # A bad file changes nothing and says every error.
    aclfile.write_text("user worker on +nosuch\nnot a user line\n")
    with pytest.raises(redis.ResponseError) as info:
        admin.execute_command("ACL", "LOAD")
    text = str(info.value)
    assert "Error in applying operation '+nosuch'" in text
    assert "should start with user keyword" in text
    assert text.endswith("no change to the previously active ACL rules was performed")
    assert admin.execute_command("ACL", "LIST") == listed
    # ACL LOAD closes the connections of every user but default.
    aclfile.write_bytes(b"".join(line + b"\n" for line in listed))
    admin.execute_command("ACL", "LOAD")
    with pytest.raises(ConnectionError):
        worker.call("Q.LIST")
    assert admin.ping()
    worker.close()


def test_the_default_user_turned_off(server: NaradProcess, admin: redis.Redis) -> None:
    admin.execute_command("ACL", "SETUSER", "root", "on", ">rootpw", "~*", "&*", "+@all")
    assert admin.execute_command("ACL", "SETUSER", "default", "off") == b"OK"
    # As in Redis, the connections logged in as default stay; new ones must log in.
    assert admin.ping()
    with Raw(server.port) as raw:
        assert raw.call("PING") == ("error", "NOAUTH Authentication required.")
        assert raw.call("AUTH", "default", "") == (
            "error", "WRONGPASS invalid username-password pair or user is disabled."
        )
        assert raw.call("AUTH", "root", "rootpw") == b"OK"
        assert raw.call("PING") == b"PONG"
    admin.execute_command("ACL", "SETUSER", "default", "on")
    with Raw(server.port) as raw:
        assert raw.call("PING") == b"PONG"


def test_requirepass_is_the_default_users_password(
    server: NaradProcess, admin: redis.Redis
) -> None:
    admin.config_set("requirepass", "pw1")
    try:
        got = _getuser(admin, "default", "pw1")
        assert got[b"flags"] == [b"on", b"sanitize-payload"] and len(got[b"passwords"]) == 1
        assert admin.config_get("requirepass") == {"requirepass": "pw1"}
        with Raw(server.port) as raw:
            assert raw.call("PING") == ("error", "NOAUTH Authentication required.")
            assert raw.call("AUTH", "pw1") == b"OK"
            assert raw.call("ACL", "WHOAMI") == b"default"
    finally:
        admin.config_set("requirepass", "")
    assert admin.execute_command("ACL", "LIST") == [
        b"user default on nopass sanitize-payload ~* &* +@all"
    ]


def test_client_list_and_kill_by_user(server: NaradProcess, admin: redis.Redis) -> None:
    admin.execute_command("ACL", "SETUSER", "worker", *QUEUE_USER)
    worker = as_user(server, "worker", "qpw")
    worker.execute_command("Q.LIST")
    assert b"user=default" in admin.execute_command("CLIENT", "INFO")
    assert admin.execute_command("CLIENT", "KILL", "USER", "worker") == 1
    with pytest.raises(redis.ResponseError, match="No such user 'nobody'"):
        admin.execute_command("CLIENT", "KILL", "USER", "nobody")
    worker.close()


def test_user_lines_load_at_start(tmp_path: Path) -> None:
    conf = tmp_path / "narad.conf"
    conf.write_text('user worker on >qpw ~jobs:* +@queue\nuser default on nopass ~* &* +@all\n')
    process = NaradProcess(tmp_path, ["--config", str(conf)])
    process.start()
    try:
        worker = as_user(process, "worker", "qpw")
        assert worker.execute_command("Q.LIST") == []
        assert nopermission(lambda: worker.execute_command("Q.CREATE", "x")) == (
            "No permissions to access a key"
        )
        admin = process.client()
        admin.execute_command("ACL", "SETUSER", "extra", "on", "nopass")
        admin.config_rewrite()
        text = conf.read_text()
        assert "user extra on nopass sanitize-payload resetchannels -@all" in text
        assert text.count("user worker ") == 1
        worker.close()
        admin.close()
    finally:
        process.stop()
    process.start()
    try:
        assert process.client().execute_command("ACL", "USERS") == [b"default", b"extra", b"worker"]
    finally:
        process.stop()


def test_user_flags_on_the_command_line(tmp_path: Path) -> None:
    """`--user NAME RULE...` is a `user` line, as on redis-server's command line."""
    process = NaradProcess(tmp_path, [
        "--user", "worker", "on", ">qpw", "~jobs:*", "+@queue",
        "--user", "replica", "on", ">rpw", "+@replication", "+ping",
    ])
    process.start()
    try:
        assert process.client().execute_command("ACL", "USERS") == [
            b"default", b"replica", b"worker"]
        assert as_user(process, "worker", "qpw").execute_command("Q.LIST") == []
    finally:
        process.stop()
    bad = NaradProcess(tmp_path / "bad", ["--user", "worker", "on", "+nosuch"])
    done = subprocess.run(bad.argv(), capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert "Error loading ACL rule '+nosuch' for the user named 'worker'" in done.stderr


def test_user_lines_and_aclfile_together_refuse_to_start(tmp_path: Path) -> None:
    conf = tmp_path / "narad.conf"
    aclfile = tmp_path / "users.acl"
    aclfile.write_text("")
    conf.write_text(f"aclfile {aclfile}\nuser worker on >qpw\n")
    process = NaradProcess(tmp_path, ["--config", str(conf)])
    done = subprocess.run(process.argv(), capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert "define either an ACL file or declare users directly" in done.stderr
    conf.write_text("user worker on +nosuch\n")
    done = subprocess.run(process.argv(), capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert "Error loading ACL rule '+nosuch' for the user named 'worker'" in done.stderr


def test_a_restricted_user_pipelines_through_the_fast_path(
    server: NaradProcess, admin: redis.Redis
) -> None:
    admin.execute_command("ACL", "SETUSER", "bench", "on", ">b", "~bench:*", "+@all")
    admin.execute_command("Q.CREATE", "bench:q")
    bench = as_user(server, "bench", "b")
    pipe = bench.pipeline(transaction=False)
    for i in range(50):
        pipe.execute_command("XADD", "bench:s", "*", "i", i)
        pipe.execute_command("Q.PUSH", "bench:q", i)
    pipe.execute_command("XADD", "other", "*", "i", 0)
    replies = pipe.execute(raise_on_error=False)
    assert all(isinstance(r, bytes) for r in replies[:-1])
    assert isinstance(replies[-1], redis.exceptions.NoPermissionError)
    assert admin.xlen("bench:s") == 50 and admin.exists("other") == 0
    bench.close()
