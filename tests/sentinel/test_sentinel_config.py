"""sentinel.conf: loading with Redis Sentinel's errors, the rewrite that keeps the
file's other lines, SENTINEL SET and CONFIG, and conf/sentinel.conf (real files)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from narad.sentinel import config
from narad.sentinel.config import ConfigError, MasterConfig

ROOT = Path(__file__).resolve().parents[2]
MYID = "a" * 40


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sentinel.conf"
    path.write_text(text)
    return path


def test_the_example_is_the_rendered_table_and_loads_to_the_defaults() -> None:
    path = ROOT / "conf" / "sentinel.conf"
    assert path.read_text() == config.render_example()
    loaded = config.load(path)
    assert loaded.port == 26379 and loaded.bind == ["127.0.0.1"]
    master = loaded.masters["mymaster"]
    assert (master.host, master.port, master.quorum) == ("127.0.0.1", 6379, 2)
    assert (master.down_after_ms, master.failover_timeout_ms, master.parallel_syncs) == (
        30000, 180000, 1)
    assert master.auth_pass is None and loaded.requirepass is None


def test_every_directive_loads(tmp_path: Path) -> None:
    path = _write(tmp_path, f"""\
port 26400
bind 127.0.0.1 ::1
loglevel warning
requirepass "s3cret pw"
protected-mode no
daemonize no
sentinel myid {MYID}
sentinel current-epoch 7
sentinel announce-ip 10.0.0.1
sentinel announce-port 26500
sentinel resolve-hostnames yes
sentinel sentinel-pass other
sentinel monitor g1 10.0.0.2 6380 2
sentinel down-after-milliseconds g1 1000
sentinel failover-timeout g1 5000
sentinel parallel-syncs g1 2
sentinel auth-pass g1 pw
sentinel auth-user g1 app
sentinel config-epoch g1 3
sentinel leader-epoch g1 4
sentinel known-replica g1 10.0.0.3 6381
sentinel known-slave g1 10.0.0.4 6382
sentinel known-sentinel g1 10.0.0.5 26379 {"b" * 40}
""")
    c = config.load(path)
    assert (c.port, c.bind, c.loglevel, c.requirepass) == (26400, ["127.0.0.1", "::1"],
                                                            "warning", "s3cret pw")
    assert (c.myid, c.current_epoch, c.announce_ip, c.announce_port) == (MYID, 7, "10.0.0.1",
                                                                         26500)
    assert c.resolve_hostnames and c.sentinel_pass == "other"
    g = c.masters["g1"]
    assert (g.down_after_ms, g.failover_timeout_ms, g.parallel_syncs) == (1000, 5000, 2)
    assert (g.auth_pass, g.auth_user, g.config_epoch, g.leader_epoch) == ("pw", "app", 3, 4)
    assert g.known_replicas == [("10.0.0.3", 6381), ("10.0.0.4", 6382)]
    assert g.known_sentinels == [("10.0.0.5", 26379, "b" * 40)]


@pytest.mark.parametrize("line, reason", [
    ("sentinel monitor g 127.0.0.1 6379 0", "Quorum must be 1 or greater."),
    ("sentinel down-after-milliseconds nope 10", "No such master with specified name."),
    ("sentinel frobnicate g", "Unrecognized sentinel configuration statement."),
    ("sentinel monitor g 127.0.0.1 6379", "Wrong number of arguments"),
    ("sentinel down-after-milliseconds g x", "Invalid number 'x'"),
    ("sentinel myid xyz", "Malformed Sentinel id in myid option."),
    ('sentinel monitor "g 127.0.0.1 6379 2', "Unbalanced quotes in configuration line"),
    ("port 99999", "Invalid port"),
    ("daemonize yes", "daemonize is not supported"),
    ("nonsense 1", "Bad directive or wrong number of arguments"),
])
def test_a_bad_line_names_its_line_and_reason(tmp_path: Path, line: str, reason: str) -> None:
    path = _write(tmp_path, f"# a comment\nsentinel monitor g 127.0.0.1 6379 2\n{line}\n")
    with pytest.raises(ConfigError) as raised:
        config.load(path)
    assert raised.value.line == 3
    assert raised.value.reason.startswith(reason)
    assert f"at line 3\n>>> '{line}'" in str(raised.value)


def test_overrides_act_as_lines_after_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "port 26390\nsentinel monitor g 127.0.0.1 6379 2\n")
    c = config.load(path, [("--port", ["26391"]), ("bind", ["0.0.0.0", "::"])])
    assert c.port == 26391 and c.bind == ["0.0.0.0", "::"]
    with pytest.raises(ConfigError, match="at option --port"):
        config.load(path, [("--port", ["x"])])


def test_a_rewrite_keeps_other_lines_and_writes_the_state(tmp_path: Path) -> None:
    path = _write(tmp_path, """\
# my sentinel
port 26390

sentinel monitor g 127.0.0.1 6379 2
sentinel down-after-milliseconds g 1000
# the end
""")
    os.chmod(path, 0o640)
    c = config.load(path)
    c.myid = MYID
    c.current_epoch = 3
    g = c.masters["g"]
    g.host, g.port, g.config_epoch = "127.0.0.2", 6400, 3
    g.known_replicas.append(("127.0.0.1", 6379))
    g.known_sentinels.append(("127.0.0.1", 26391, "c" * 40))
    config.rewrite(c)
    text = path.read_text()
    assert text == f"""\
# my sentinel
port 26390

sentinel myid {MYID}
sentinel current-epoch 3
sentinel monitor g 127.0.0.2 6400 2
sentinel down-after-milliseconds g 1000
sentinel config-epoch g 3
sentinel leader-epoch g 0
sentinel known-replica g 127.0.0.1 6379
sentinel known-sentinel g 127.0.0.1 26391 {"c" * 40}
# the end
"""
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert config.load(path) == c
    assert not list(tmp_path.glob("*.tmp*"))  # the temporary file is gone


def test_sentinel_set_and_config(tmp_path: Path) -> None:
    master = MasterConfig("g", "127.0.0.1", 6379, 2)
    config.set_master_option(master, "DOWN-AFTER-MILLISECONDS", "1500")
    config.set_master_option(master, "quorum", "3")
    config.set_master_option(master, "auth-pass", "pw")
    assert (master.down_after_ms, master.quorum, master.auth_pass) == (1500, 3, "pw")
    config.set_master_option(master, "auth-pass", "")
    assert master.auth_pass is None
    for option, value in [("quorum", "0"), ("failover-timeout", "x"), ("nope", "1")]:
        with pytest.raises(ValueError, match=f"Invalid argument '{value}' for SENTINEL SET"):
            config.set_master_option(master, option, value)
    c = config.load(_write(tmp_path, "sentinel monitor g 127.0.0.1 6379 2\n"))
    assert config.config_get(c, "announce-*") == [("announce-hostnames", "no"),
                                                  ("announce-ip", ""), ("announce-port", "0")]
    config.config_set(c, [("announce-ip", "10.1.1.1"), ("resolve-hostnames", "yes")])
    assert c.announce_ip == "10.1.1.1" and c.resolve_hostnames
    with pytest.raises(ValueError, match="Invalid value 'maybe'"):
        config.config_set(c, [("announce-port", "1"), ("resolve-hostnames", "maybe")])
    assert c.announce_port == 0  # all or nothing
    with pytest.raises(ValueError, match="Invalid argument 'nope'"):
        config.config_set(c, [("nope", "1")])


_names = st.text("abcdefgh-_0123456789", min_size=1, max_size=8)


@settings(max_examples=40, deadline=None)
@given(
    names=st.lists(_names, min_size=1, max_size=3, unique=True),
    epoch=st.integers(0, 10**6),
    down_after=st.integers(1, 10**6),
    replicas=st.lists(st.tuples(st.sampled_from(["127.0.0.1", "::1", "10.0.0.9"]),
                                st.integers(1, 65535)), max_size=3, unique=True),
)
def test_render_then_load_is_the_same(
    tmp_path_factory: pytest.TempPathFactory, names: list[str], epoch: int, down_after: int,
    replicas: list[tuple[str, int]],
) -> None:
    path = tmp_path_factory.mktemp("c") / "sentinel.conf"
    path.write_text("")
    c = config.SentinelConfig(path, myid=MYID, current_epoch=epoch)
    for name in names:
        c.masters[name] = MasterConfig(name, "127.0.0.1", 6379, 2, down_after_ms=down_after,
                                       known_replicas=list(replicas), config_epoch=epoch)
    config.rewrite(c)
    assert config.load(path) == c


def test_tls_directives_load_and_survive_a_rewrite(tmp_path: Path) -> None:
    path = _write(tmp_path, """\
port 0
tls-port 26380
tls-cert-file /etc/narad/sentinel.crt
tls-key-file /etc/narad/sentinel.key
tls-ca-cert-file /etc/narad/ca.crt
tls-auth-clients optional
tls-replication yes
tls-protocols "TLSv1.2 TLSv1.3"
tls-prefer-server-ciphers yes
sentinel monitor mymaster 127.0.0.1 6380 2
""")
    loaded = config.load(path)
    assert (loaded.port, loaded.tls_port) == (0, 26380)
    tls = loaded.tls
    assert (tls.cert_file, tls.key_file, tls.ca_cert_file) == (
        "/etc/narad/sentinel.crt", "/etc/narad/sentinel.key", "/etc/narad/ca.crt")
    assert (tls.auth_clients, tls.replication, tls.protocols, tls.prefer_server_ciphers) == (
        "optional", True, "TLSv1.2 TLSv1.3", True)
    loaded.myid = MYID
    config.rewrite(loaded)
    assert config.load(path) == loaded


@pytest.mark.parametrize(("line", "reason"), [
    ("tls-auth-clients maybe", "argument(s) must be one of the following: no, yes, optional"),
    ("tls-replication perhaps", "argument must be 'yes' or 'no'"),
    ("tls-port 70000", "Invalid port"),
])
def test_a_bad_tls_directive_is_refused(tmp_path: Path, line: str, reason: str) -> None:
    path = _write(tmp_path, f"{line}\n")
    with pytest.raises(ConfigError) as info:
        config.load(path)
    assert info.value.reason == reason
