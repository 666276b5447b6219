"""The Celery transport's pure parts: the delay an ETA asks for, and the narad.client
URL a kombu connection stands for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

pytest.importorskip("kombu")

from kombu import Connection

from narad.celery import Transport, delay_ms_of

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(("eta", "expect"), [
    (None, 0),
    ("2026-01-01T12:00:02.500000+00:00", 2500),
    ("2026-01-01T14:00:02+02:00", 2000),       # another zone, the same instant + 2 s
    ("2026-01-01T12:00:03", 3000),             # naive: UTC
    ("2026-01-01T11:59:00+00:00", 0),          # past: at once
    ("not a date", 0),
])
def test_delay_of_an_eta(eta: str | None, expect: int) -> None:
    headers = {} if eta is None else {"eta": eta}
    assert delay_ms_of({"headers": headers}, now=NOW) == expect


def test_a_countdown_becomes_its_delay() -> None:
    eta = (NOW + timedelta(seconds=10)).astimezone(timezone(timedelta(hours=-5)))
    assert delay_ms_of({"headers": {"eta": eta.isoformat()}}, now=NOW) == 10_000


@pytest.mark.parametrize(("url", "expect"), [
    ("narad://10.0.0.5:7000/3", "narad://10.0.0.5:7000/3"),
    ("narad+sentinel://s1:26379,s2:26379/mymaster", "narad+sentinel://s1:26379,s2:26379/mymaster"),
    ("narad+tls://h:6380?ca=/ca.pem", "narad+tls://h:6380?ca=/ca.pem"),
])
def test_broker_urls_reach_the_client(url: str, expect: str) -> None:
    assert Transport.url_of(Connection(url)) == expect


def test_a_connection_without_url() -> None:
    conn = Connection(hostname="h", port=7001, transport="narad", virtual_host="2",
                      password="pw")
    assert Transport.url_of(conn) == "narad://:pw@h:7001/2"


def test_urls_print_without_their_password() -> None:
    conn = Connection("narad+sentinel://u:secret@s1:26379,s2:26379/mymaster")
    assert conn.as_uri() == "narad+sentinel://u:**@s1:26379,s2:26379/mymaster"
    assert "secret" in conn.as_uri(include_password=True)
