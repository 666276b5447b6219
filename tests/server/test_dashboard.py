"""The dashboard on the metrics port: its JSON against real work on a real node with a
replica, and the page itself loaded in headless Chromium (apt's `chromium`), whose
DOM must show every queue with its depth. The screenshot is left in the test's
tmp_path."""

from __future__ import annotations

import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.replication.cluster import follow, wait_synced
from tests.server.metering import MeteredNarad, basic
from tests.servers import wait_until

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _state(node: MeteredNarad) -> dict[str, object]:
    status, headers, body = node.get("/api/state")
    assert status == 200 and headers["Content-Type"] == "application/json"
    return json.loads(body)  # type: ignore[no-any-return]


@pytest.fixture
def pair(tmp_path: Path):  # type: ignore[no-untyped-def]
    leader = MeteredNarad(tmp_path / "leader").start()
    replica = MeteredNarad(tmp_path / "replica").start()
    try:
        follow(replica, leader)
        yield leader, replica
    finally:
        replica.stop()
        leader.stop()


def _fill(node: MeteredNarad) -> dict[str, int]:
    """Queues with different depths; their visible counts."""
    r = node.client()
    r.execute_command("Q.CREATE", "dash-dlq")
    r.execute_command("Q.CREATE", "orders", "DLQ", "dash-dlq", "MAXRECEIVES", 1)
    r.execute_command("Q.PUSH", "orders", *[f"o{i}" for i in range(7)])
    r.execute_command("Q.POP", "orders", "COUNT", 2)
    r.execute_command("Q.CREATE", "emails")
    r.execute_command("Q.PUSH", "emails", "e1", "e2", "e3")
    r.execute_command("Q.CREATE", "<b>odd & name</b>")
    r.execute_command("Q.PUSH", "<b>odd & name</b>", "x")
    r.xadd("events", {"k": "v"})
    r.xgroup_create("events", "readers", id="0")
    return {"dash-dlq": 0, "orders": 5, "emails": 3, "<b>odd & name</b>": 1}


def test_state_json(pair) -> None:  # type: ignore[no-untyped-def]
    leader, replica = pair
    depths = _fill(leader)
    position = wait_synced(leader, [replica])
    state = _state(leader)
    queues = {q["name"]: q for q in state["queues"]}  # type: ignore[attr-defined]
    assert {name: q["visible"] for name, q in queues.items()} == depths
    assert queues["orders"]["inflight"] == 2
    assert queues["orders"]["dlq"] == "dash-dlq"
    assert queues["orders"]["pushed"] == 7
    streams = {s["name"]: s for s in state["streams"]}  # type: ignore[attr-defined]
    assert streams["events"]["length"] == 1
    assert streams["events"]["groups"] == [
        {"name": "readers", "lag": 1, "pending": 0, "consumers": 0}
    ]
    node = state["node"]
    assert node["role"] == "leader" and node["offset"] == position  # type: ignore[index]
    replica_name = f"{replica.host}:{replica.port}"
    assert [r["name"] for r in state["replicas"]] == [replica_name]  # type: ignore[attr-defined]
    theirs = _state(replica)
    assert theirs["node"]["role"] == "replica" and theirs["node"]["link_up"]  # type: ignore[index]
    assert theirs["node"]["leader"] == f"{leader.host}:{leader.port}"  # type: ignore[index]


def test_the_page_asks_for_credentials_when_clients_must_log_in(tmp_path: Path) -> None:
    node = MeteredNarad(tmp_path / "pw", ["--requirepass", "pw"]).start()
    try:
        assert node.get("/")[0] == 401
        assert node.get("/api/state")[0] == 401
        status, headers, body = node.get("/", basic("default", "pw"))
        assert status == 200 and headers["Content-Type"].startswith("text/html")
        assert b"<title>Narad</title>" in body
    finally:
        node.stop()


class _Rows(HTMLParser):
    """Each queue row of the page: name -> {cell class: text}."""

    def __init__(self) -> None:
        super().__init__()
        self.queues: dict[str, dict[str, str]] = {}
        self.replicas: list[str] = []
        self._row: dict[str, str] | None = None
        self._cell: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "tr" and a.get("data-queue") is not None:
            self._row = self.queues.setdefault(a["data-queue"] or "", {})
        elif tag == "tr" and a.get("data-replica") is not None:
            self.replicas.append(a["data-replica"] or "")
        elif tag == "td" and self._row is not None:
            self._cell = a.get("class") or ""
            self._row[self._cell] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr":
            self._row = None
        if tag == "td":
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._row is not None and self._cell:
            self._row[self._cell] += data


def _chromium(url: str, tmp_path: Path, *extra: str) -> str:
    assert CHROMIUM is not None
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--user-data-dir={tmp_path / 'chromium-profile'}", "--window-size=1280,1000",
         "--virtual-time-budget=3000", *extra, url],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_the_page_in_chromium_shows_every_queue_with_its_depth(pair, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    leader, replica = pair
    depths = _fill(leader)
    wait_synced(leader, [replica])
    replica_name = f"{replica.host}:{replica.port}"
    wait_until(lambda: [r["name"] for r in _state(leader)["replicas"]] == [replica_name])  # type: ignore[attr-defined]
    rows = _Rows()
    rows.feed(_chromium(leader.url("/"), tmp_path, "--dump-dom"))
    assert {name: int(row["visible"]) for name, row in rows.queues.items()} == depths
    assert rows.queues["orders"]["inflight"] == "2"
    assert rows.queues["orders"]["dlq-depth"] == "0"
    assert rows.replicas == [replica_name]
    # The replica's page shows the same queues, as it applied them.
    on_replica = _Rows()
    on_replica.feed(_chromium(replica.url("/"), tmp_path, "--dump-dom"))
    assert {n: int(r["visible"]) for n, r in on_replica.queues.items()} == depths
    shot = tmp_path / "dashboard.png"
    _chromium(leader.url("/"), tmp_path, f"--screenshot={shot}")
    assert shot.read_bytes().startswith(b"\x89PNG")
