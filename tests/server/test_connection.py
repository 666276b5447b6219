"""Connection commands: PING, ECHO, HELLO, AUTH, SELECT, SWAPDB, FLUSHDB, FLUSHALL, QUIT,
RESET and CLIENT ..., side by side with redis-server 7.0 where Redis 7.0 has them."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.server.raw import Raw, call_both, read_exactly
from tests.servers import NaradProcess, RedisProcess, wait_until

SCRIPTS = {
    "ping_echo": [
        ["PING"],
        ["PING", "hello"],
        ["PING", "a", "b"],
        ["ECHO"],
        ["ECHO", "hi"],
        ["ECHO", ""],
        ["ECHO", b"\x00\xff\r\n"],
        ["ECHO", "a", "b"],
        ["ping"],
        ["pInG", "x"],
    ],
    "hello_errors": [
        ["HELLO", "4"],
        ["HELLO", "1"],
        ["HELLO", "x"],
        ["HELLO", "-1"],
        ["HELLO", "2", "foo"],
        ["HELLO", "3", "AUTH"],
        ["HELLO", "3", "AUTH", "default"],
        ["HELLO", "3", "SETNAME"],
        ["HELLO", "2", "SETNAME", "a b"],
        ["HELLO", "2", "SETNAME", "a\nb"],
        ["HELLO", "2", "AUTH", "someone", "pw"],
        ["CLIENT", "GETNAME"],
    ],
    "auth_without_password": [
        ["AUTH", "x"],
        ["AUTH", "someone", "pw"],
        ["AUTH", "default", "anything"],
        ["AUTH", "a", "b", "c"],
        ["AUTH"],
        ["HELLO", "2", "AUTH", "default", "anything", "SETNAME", "named"],
        ["CLIENT", "GETNAME"],
    ],
    "select_swapdb": [
        ["SELECT", "15"],
        ["SELECT", "16"],
        ["SELECT", "-1"],
        ["SELECT", "1.5"],
        ["SELECT", "x"],
        ["SELECT"],
        ["SELECT", "0"],
        ["SWAPDB", "0", "16"],
        ["SWAPDB", "16", "0"],
        ["SWAPDB", "-1", "0"],
        ["SWAPDB", "x", "0"],
        ["SWAPDB", "0", "x"],
        ["SWAPDB", "0"],
        ["SWAPDB", "0", "0"],
        ["DBSIZE", "x"],
        ["FLUSHDB", "x"],
        ["FLUSHDB", "ASYNC"],
        ["FLUSHDB", "sync"],
        ["FLUSHDB", "SYNC", "ASYNC"],
        ["FLUSHALL", "x"],
        ["FLUSHALL", "ASYNC"],
        ["FLUSHALL", "SYNC"],
    ],
    "client_errors": [
        ["CLIENT"],
        ["CLIENT", "nosuch"],
        ["CLIENT", "ID", "x"],
        ["CLIENT", "SETNAME"],
        ["CLIENT", "SETNAME", "a b"],
        ["CLIENT", "SETNAME", "é"],
        ["CLIENT", "SETNAME", ""],
        ["CLIENT", "GETNAME"],
        ["CLIENT", "SETNAME", "ok-name"],
        ["CLIENT", "GETNAME"],
        ["CLIENT", "GETNAME", "x"],
        ["CLIENT", "KILL", "1.2.3.4:5"],
        ["CLIENT", "KILL", "ID", "999999"],
        ["CLIENT", "KILL", "ID", "x"],
        ["CLIENT", "KILL", "ID", "0"],
        ["CLIENT", "KILL", "ID"],
        ["CLIENT", "KILL", "foo", "bar"],
        ["CLIENT", "KILL", "SKIPME", "maybe"],
        ["CLIENT", "KILL", "ADDR", "1.2.3.4:5"],
        ["CLIENT", "KILL", "LADDR", "1.2.3.4:5"],
        ["CLIENT", "KILL", "USER", "nobody"],
        ["CLIENT", "KILL", "TYPE", "master"],
        ["CLIENT", "NO-EVICT", "on"],
        ["CLIENT", "NO-EVICT", "OFF"],
        ["CLIENT", "NO-EVICT", "maybe"],
        ["CLIENT", "NO-EVICT"],
        ["CLIENT", "REPLY", "maybe"],
        ["CLIENT", "REPLY", "ON"],
        ["CLIENT", "LIST", "TYPE", "foo"],
        ["CLIENT", "LIST", "ID", "x"],
        ["CLIENT", "LIST", "foo"],
        ["CLIENT", "LIST", "TYPE", "master"],
        ["CLIENT", "LIST", "ID", "999999"],
        ["CLIENT", "INFO", "x"],
    ],
    "misc": [
        ["FUNCTION", "FLUSH"],
        ["FUNCTION", "FLUSH", "ASYNC"],
        ["FUNCTION", "FLUSH", "sync"],
        ["FUNCTION", "FLUSH", "x"],
        ["FUNCTION"],
        ["FUNCTION", "nosuch"],
        ["WAIT", "0", "0"],
        ["WAIT", "1", "10"],
        ["WAIT", "x", "0"],
        ["WAIT", "0", "-1"],
        ["WAIT", "0", "x"],
        ["WAIT", "0"],
        ["TIME", "x"],
        ["LASTSAVE", "x"],
        ["RESET", "x"],
        ["MONITOR", "x"],
        ["SHUTDOWN", "x"],
        ["SHUTDOWN", "ABORT"],
        ["NOSUCHCOMMAND", "a", "b"],
        ["nosuchcommand"],
    ],
}


@pytest.fixture(scope="module")
def both(shared_narad: NaradProcess, redis_server: RedisProcess) -> tuple[int, int]:
    return shared_narad.port, redis_server.port


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_same_replies_as_redis(name: str, both: tuple[int, int]) -> None:
    assert call_both(*both, SCRIPTS[name]) == []


# -- HELLO and RESP3 ----------------------------------------------------------------------


@pytest.mark.parametrize("proto", [2, 3])
def test_hello_reply(shared_narad: NaradProcess, proto: int) -> None:
    with Raw(shared_narad.port) as conn:
        my_id = conn.call("CLIENT", "ID")
        reply = conn.call("HELLO", proto, "SETNAME", f"hello{proto}")
        if proto == 2:
            assert isinstance(reply, list)
            reply = dict(zip(reply[::2], reply[1::2], strict=True))
        assert reply == {
            b"server": b"redis",
            b"version": reply[b"version"],
            b"proto": proto,
            b"id": my_id,
            b"mode": b"standalone",
            b"role": b"master",
            b"modules": [],
        }
        assert reply[b"version"].startswith(b"7.0.")
        assert conn.call("CLIENT", "GETNAME") == f"hello{proto}".encode()
        # HELLO with no version answers in the current protocol and keeps it.
        again = conn.call("HELLO")
        assert isinstance(again, dict if proto == 3 else list)


def test_resp3_reply_shapes(shared_narad: NaradProcess) -> None:
    with Raw(shared_narad.port) as conn:
        conn.call("HELLO", "3")
        conn.call("SELECT", "3")
        conn.call("DEL", "shape")
        conn.call("XADD", "shape", "1-0", "f", "v")
        conn.send(b"XREAD STREAMS shape 0\r\n")
        assert conn.read() == {b"shape": [[b"1-0", [b"f", b"v"]]]}
        # A RESP3 null and a RESP3 map, on the wire.
        conn.send(b"XREAD STREAMS shape 1-0\r\nCONFIG GET maxclients\r\n")
        expected = b"_\r\n%1\r\n$10\r\nmaxclients\r\n$5\r\n10000\r\n"
        assert read_exactly(conn.sock, len(expected)) == expected


@pytest.mark.parametrize("proto", [2, 3])
def test_redis_py_sync(shared_narad: NaradProcess, proto: int) -> None:
    client = shared_narad.client(protocol=proto, db=4)
    key = f"py{proto}"
    client.delete(key)
    assert client.ping() is True
    assert client.echo("x") == b"x"
    first = client.xadd(key, {"a": "1"})
    client.xadd(key, {"b": "2"})
    assert client.xlen(key) == 2
    entries = client.xrange(key)
    assert [fields for _, fields in entries] == [{b"a": b"1"}, {b"b": b"2"}]
    read = client.xread({key: first})
    if proto == 3:
        assert read == {key.encode(): [[entries[1]]]}
    else:
        assert read == [[key.encode(), [entries[1]]]]
    assert client.client_setname("py-client") is True
    assert client.client_getname() in ("py-client", b"py-client")
    assert client.client_info()["resp"] == str(proto)
    assert client.client_info()["db"] == 4
    client.close()


@pytest.mark.anyio
@pytest.mark.parametrize("proto", [2, 3])
async def test_redis_py_asyncio(shared_narad: NaradProcess, proto: int) -> None:
    import redis.asyncio

    client = redis.asyncio.Redis(port=shared_narad.port, protocol=proto, db=5)
    key = f"async{proto}"
    await client.delete(key)
    assert await client.ping() is True
    ids = [await client.xadd(key, {"n": str(i)}) for i in range(3)]
    assert await client.xlen(key) == 3
    assert [e[0] for e in await client.xrange(key)] == ids
    async with client.pipeline(transaction=True) as pipe:
        pipe.xlen(key).xadd(key, {"n": "3"}).xlen(key)
        results = await pipe.execute()
    assert results[0] == 3 and results[2] == 4
    await client.aclose()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# -- AUTH and requirepass -------------------------------------------------------------------


AUTH_SCRIPTS = {
    "noauth": [
        ["PING"],
        ["ECHO", "x"],
        ["XADD", "s", "*", "a", "1"],
        ["SELECT", "1"],
        ["CLIENT", "SETNAME", "x"],
        ["MULTI"],
        ["INFO"],
        ["NOSUCHCOMMAND"],
        ["HELLO"],
        ["HELLO", "3"],
        ["HELLO", "2", "SETNAME", "x"],
        ["HELLO", "3", "AUTH", "default", "wrong"],
        ["HELLO", "3", "AUTH", "other", "s3cret"],
        ["AUTH", "wrong"],
        ["AUTH", "other", "s3cret"],
        ["AUTH", "default", "wrong"],
        ["AUTH", "a", "b", "c"],
        ["PING"],
    ],
    "auth_password": [
        ["AUTH", "s3cret"],
        ["PING"],
        ["AUTH", "wrong"],
        ["PING"],
        ["RESET"],
        ["PING"],
    ],
    "auth_user_password": [
        ["AUTH", "default", "s3cret"],
        ["ECHO", "in"],
        ["RESET"],
        ["ECHO", "out"],
    ],
    "hello_auth": [
        ["HELLO", "2", "AUTH", "default", "s3cret", "SETNAME", "me"],
        ["CLIENT", "GETNAME"],
        ["PING"],
    ],
}


@pytest.mark.parametrize("name", sorted(AUTH_SCRIPTS))
def test_auth_same_as_redis(name: str, narad_pw: NaradProcess, redis_pw: RedisProcess) -> None:
    script = AUTH_SCRIPTS[name]
    diffs = call_both(narad_pw.port, redis_pw.port, script)
    assert diffs == []


def test_refused_exec_is_execabort(narad_pw: NaradProcess, redis_pw: RedisProcess) -> None:
    script = [["MULTI"], ["EXEC"]]
    assert call_both(narad_pw.port, redis_pw.port, script) == []


NO_RETRY = Retry(NoBackoff(), 0)  # redis-py retries failed connections with a backoff


@pytest.mark.parametrize("proto", [2, 3])
def test_redis_py_with_password(narad_pw: NaradProcess, proto: int) -> None:
    with pytest.raises(redis.AuthenticationError):
        narad_pw.client(protocol=proto, password="wrong", retry=NO_RETRY).ping()
    client = narad_pw.client(protocol=proto, password="s3cret")
    assert client.ping() is True
    assert client.xadd("authed", {"a": "1"})
    client.close()
    named = narad_pw.client(protocol=proto, username="default", password="s3cret")
    assert named.xlen("authed") >= 1
    named.close()
    with pytest.raises(redis.AuthenticationError):
        narad_pw.client(protocol=proto, retry=NO_RETRY).ping()


def test_noauth_over_raw_socket(narad_pw: NaradProcess) -> None:
    with socket.create_connection(("127.0.0.1", narad_pw.port), timeout=5) as sock:
        sock.sendall(b"PING\r\nAUTH s3cret\r\nPING\r\n")
        expected = b"-NOAUTH Authentication required.\r\n+OK\r\n+PONG\r\n"
        assert read_exactly(sock, len(expected)) == expected


# -- SELECT / SWAPDB / FLUSHDB / FLUSHALL over 16 databases --------------------------------


def test_sixteen_databases_as_redis(both: tuple[int, int]) -> None:
    script: list[list[object]] = [["FLUSHALL"]]
    for db in range(16):
        script += [["SELECT", db], *[["XADD", f"k{i}", "1-0", "db", db] for i in range(db + 1)]]
    for db in range(16):
        script += [["SELECT", db], ["DBSIZE"], ["XRANGE", "k0", "-", "+"], ["EXISTS", f"k{db}"]]
    script += [
        ["SELECT", "0"],
        ["SWAPDB", "0", "15"],
        ["DBSIZE"],
        ["XRANGE", "k0", "-", "+"],
        ["SELECT", "15"],
        ["DBSIZE"],
        ["XRANGE", "k0", "-", "+"],
        ["SWAPDB", "3", "3"],
        ["SELECT", "3"],
        ["DBSIZE"],
        ["FLUSHDB"],
        ["DBSIZE"],
        ["SELECT", "4"],
        ["DBSIZE"],
        ["FLUSHALL"],
        *[x for db in range(16) for x in (["SELECT", db], ["DBSIZE"])],
    ]
    assert call_both(*both, script) == []


def test_swapdb_seen_by_other_connections(shared_narad: NaradProcess) -> None:
    a = shared_narad.client(db=6)
    b = shared_narad.client(db=7)
    a.delete("swapped")
    b.delete("swapped")
    a.xadd("swapped", {"from": "6"})
    a.swapdb(6, 7)
    assert a.exists("swapped") == 0
    assert b.xrange("swapped")[0][1] == {b"from": b"6"}
    a.swapdb(6, 7)
    assert a.exists("swapped") == 1
    a.close()
    b.close()


# -- QUIT / RESET ---------------------------------------------------------------------------


def test_quit_answers_ok_then_closes(
    shared_narad: NaradProcess, redis_server: RedisProcess
) -> None:
    for port in (shared_narad.port, redis_server.port):
        with Raw(port) as conn:
            conn.send(b"PING\r\nQUIT\r\nPING\r\n")
            assert conn.read_all_until_closed() == b"+PONG\r\n+OK\r\n"


def test_reset_restores_a_fresh_connection(shared_narad: NaradProcess) -> None:
    with Raw(shared_narad.port) as conn:
        conn.call("HELLO", "3")
        conn.call("SELECT", "9")
        conn.call("CLIENT", "SETNAME", "before")
        conn.call("WATCH", "k")
        conn.call("MULTI")
        assert conn.call("RESET") == b"RESET"
        info = conn.call("CLIENT", "INFO")
        assert b" db=0 " in info and b" name= " in info and b" resp=2 " in info
        assert conn.call("EXEC") == ("error", "ERR EXEC without MULTI")
        assert isinstance(conn.call("HELLO"), list)  # back to RESP2


def test_reset_requires_auth_again(narad_pw: NaradProcess) -> None:
    with Raw(narad_pw.port) as conn:
        assert conn.call("AUTH", "s3cret") == b"OK"
        assert conn.call("RESET") == b"RESET"
        assert conn.call("PING") == ("error", "NOAUTH Authentication required.")


# -- CLIENT ...------------------------------------------------------------------------------


def _client_fields(line: bytes) -> dict[str, str]:
    return dict(part.split("=", 1) for part in line.decode().split())


def test_client_id_name_list_info(shared_narad: NaradProcess) -> None:
    with Raw(shared_narad.port) as a, Raw(shared_narad.port) as b:
        id_a, id_b = a.call("CLIENT", "ID"), b.call("CLIENT", "ID")
        assert isinstance(id_a, int) and id_b > id_a
        assert a.call("CLIENT", "GETNAME") is None
        assert a.call("CLIENT", "SETNAME", "alpha") == b"OK"
        assert a.call("CLIENT", "GETNAME") == b"alpha"
        a.call("SELECT", "2")
        listing = b.call("CLIENT", "LIST").splitlines()
        by_id = {int(_client_fields(line)["id"]): _client_fields(line) for line in listing}
        assert by_id[id_a]["name"] == "alpha"
        assert by_id[id_a]["db"] == "2"
        assert by_id[id_b]["name"] == ""
        for field in ("addr", "laddr", "age", "idle", "flags", "cmd", "user", "resp", "multi"):
            assert field in by_id[id_a]
        assert by_id[id_a]["laddr"].endswith(f":{shared_narad.port}")
        only = b.call("CLIENT", "LIST", "ID", id_a, 999999).splitlines()
        assert [int(_client_fields(line)["id"]) for line in only] == [id_a]
        mine = _client_fields(a.call("CLIENT", "INFO").strip())
        assert mine["id"] == str(id_a) and mine["name"] == "alpha"
        assert mine["addr"] == by_id[id_a]["addr"]
        assert mine["cmd"] == "client|info"
        assert a.call("CLIENT", "SETNAME", "") == b"OK"
        assert a.call("CLIENT", "GETNAME") is None


def test_client_list_shows_last_command_as_redis(
    shared_narad: NaradProcess, redis_server: RedisProcess
) -> None:
    def last_command(port: int) -> str:
        with Raw(port) as worker, Raw(port) as observer:
            worker_id = worker.call("CLIENT", "ID")
            worker.call("XLEN", "nosuch")
            worker.call("CONFIG", "GET", "maxclients")
            lines = observer.call("CLIENT", "LIST", "ID", worker_id).decode().split()
        return next(field for field in lines if field.startswith("cmd="))

    assert last_command(shared_narad.port) == last_command(redis_server.port) == "cmd=config|get"


def test_databases_setting(tmp_path: Path) -> None:
    server = NaradProcess(tmp_path / "n", ["--databases", "4"]).start()
    try:
        with Raw(server.port) as conn:
            assert conn.call("CONFIG", "GET", "databases") == [b"databases", b"4"]
            assert conn.call("SELECT", "3") == b"OK"
            assert conn.call("XADD", "k", "1-0", "a", "1") == b"1-0"
            assert conn.call("SELECT", "4") == ("error", "ERR DB index is out of range")
            assert conn.call("SWAPDB", "0", "4") == ("error", "ERR DB index is out of range")
            assert conn.call("SWAPDB", "0", "3") == b"OK"
            conn.call("SELECT", "0")
            assert conn.call("XLEN", "k") == 1
            assert b"db0:keys=1" in conn.call("INFO", "keyspace")
    finally:
        server.stop()


def test_client_list_resp3_is_verbatim_text(shared_narad: NaradProcess) -> None:
    client = shared_narad.client(protocol=3)
    clients = client.client_list()
    assert any(c["id"] == str(client.client_id()) for c in clients)
    client.close()


def test_client_setinfo(shared_narad: NaradProcess) -> None:
    with Raw(shared_narad.port) as conn:
        assert conn.call("CLIENT", "SETINFO", "LIB-NAME", "mylib") == b"OK"
        assert conn.call("CLIENT", "SETINFO", "lib-ver", "1.2.3") == b"OK"
        fields = _client_fields(conn.call("CLIENT", "INFO").strip())
        assert fields["lib-name"] == "mylib" and fields["lib-ver"] == "1.2.3"
        assert conn.call("CLIENT", "SETINFO", "lib-name", "a b")[0] == "error"
        assert conn.call("CLIENT", "SETINFO", "other", "x")[0] == "error"
        assert conn.call("CLIENT", "NO-TOUCH", "ON") == b"OK"
        assert conn.call("CLIENT", "NO-TOUCH", "maybe") == ("error", "ERR syntax error")


def test_client_kill(shared_narad: NaradProcess) -> None:
    with Raw(shared_narad.port) as killer, Raw(shared_narad.port) as victim:
        victim_id = victim.call("CLIENT", "ID")
        assert killer.call("CLIENT", "KILL", "ID", victim_id) == 1
        assert victim.read_all_until_closed() == b""
        assert killer.call("CLIENT", "KILL", "ID", victim_id) == 0
    with Raw(shared_narad.port) as killer, Raw(shared_narad.port) as victim:
        addr = _client_fields(victim.call("CLIENT", "INFO").strip())["addr"]
        assert killer.call("CLIENT", "KILL", addr) == b"OK"
        assert victim.read_all_until_closed() == b""
        assert killer.call("CLIENT", "KILL", addr) == ("error", "ERR No such client")
    with Raw(shared_narad.port) as killer, Raw(shared_narad.port) as victim:
        addr = _client_fields(victim.call("CLIENT", "INFO").strip())["addr"]
        assert killer.call("CLIENT", "KILL", "ADDR", addr, "SKIPME", "yes") == 1
        assert victim.read_all_until_closed() == b""
        # SKIPME no: the caller itself is killed, after its reply.
        my_addr = _client_fields(killer.call("CLIENT", "INFO").strip())["addr"]
        killer.send_command("CLIENT", "KILL", "ADDR", my_addr, "SKIPME", "no")
        assert killer.read_all_until_closed() == b":1\r\n"
    assert shared_narad.client().ping()


def test_client_reply_off_on_skip(shared_narad: NaradProcess, redis_server: RedisProcess) -> None:
    request = (
        b"CLIENT REPLY OFF\r\nECHO a\r\nNOSUCH\r\nCLIENT REPLY ON\r\nECHO b\r\n"
        b"CLIENT REPLY SKIP\r\nECHO c\r\nECHO d\r\n"
    )
    expected = b"+OK\r\n$1\r\nb\r\n$1\r\nd\r\n"
    for port in (shared_narad.port, redis_server.port):
        with Raw(port) as conn:
            conn.send(request)
            assert read_exactly(conn.sock, len(expected)) == expected


def test_client_kill_by_maxage_and_user_filters(shared_narad: NaradProcess) -> None:
    with Raw(shared_narad.port) as conn:
        reply = conn.call("CLIENT", "KILL", "USER", "nobody")
        assert reply == ("error", "ERR No such user 'nobody'")
        assert conn.call("CLIENT", "KILL", "MAXAGE", "100000") == 0


def test_closed_connections_leave_client_list(shared_narad: NaradProcess) -> None:
    observer = shared_narad.client()
    conn = Raw(shared_narad.port)
    cid = conn.call("CLIENT", "ID")
    conn.close()

    def gone() -> bool:
        return all(c["id"] != str(cid) for c in observer.client_list())

    wait_until(gone)
    observer.close()


def test_maxclients(tmp_path: Path) -> None:
    server = NaradProcess(tmp_path / "n").start()
    try:
        admin = server.client()
        admin.config_set("maxclients", 3)
        extra = [Raw(server.port) for _ in range(2)]
        for conn in extra:
            assert conn.call("PING") == b"PONG"
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as refused:
            data = b""
            while chunk := refused.recv(1024):
                data += chunk
        assert data == b"-ERR max number of clients reached\r\n"
        for conn in extra:
            conn.close()
        assert int(admin.info("stats")["rejected_connections"]) >= 1
        admin.close()
    finally:
        server.stop()
