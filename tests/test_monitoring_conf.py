"""conf/narad-alerts.yml and conf/narad-grafana.json: well formed, and every metric
they name is one a real node (or sentinel) serves and docs/operations.md describes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.server.metering import MeteredNarad

ROOT = Path(__file__).resolve().parents[1]
NAMES = re.compile(r"\b(narad_[a-z_]+|process_[a-z_]+)\b")
SUFFIXES = ("_total", "_bucket", "_sum", "_count")


def _family(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name


def _rules() -> list[dict[str, object]]:
    loaded = yaml.safe_load((ROOT / "conf" / "narad-alerts.yml").read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def _grafana_exprs() -> list[str]:
    dashboard = json.loads((ROOT / "conf" / "narad-grafana.json").read_text())
    return [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]


def test_the_files_are_well_formed() -> None:
    rules = _rules()
    assert len(rules) >= 10
    for rule in rules:
        assert set(rule) >= {"alert", "expr", "labels", "annotations"}, rule
        assert rule["labels"]["severity"] in ("warning", "critical")  # type: ignore[index]
        assert str(rule["expr"]).count("(") == str(rule["expr"]).count(")")
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names))
    for expr in _grafana_exprs():
        assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}")


def test_the_alerting_starter_covers_what_operators_ask_for() -> None:
    exprs = " ".join(str(rule["expr"]) for rule in _rules())
    for metric in (
        "narad_queue_oldest_message_age_seconds", "narad_queue_messages_dead_lettered_total",
        "narad_replica_lag_bytes", "narad_replica_lag_seconds",
        "narad_journal_fsync_duration_seconds_bucket",
    ):
        assert metric in exprs, metric


def test_every_metric_named_is_served_and_documented(tmp_path: Path) -> None:
    node = MeteredNarad(tmp_path / "node").start()
    try:
        node.client().execute_command("Q.CREATE", "q")
        scraped = node.get("/metrics")[2].decode()
    finally:
        node.stop()
    served = {f.name for f in text_string_to_metric_families(scraped)}
    sentinel_source = (ROOT / "narad" / "sentinel" / "metrics.py").read_text()
    served |= set(re.findall(r'"(narad_sentinel_[a-z_]+)"', sentinel_source))
    docs = (ROOT / "docs" / "operations.md").read_text()
    named = set()
    for expr in [str(rule["expr"]) for rule in _rules()] + _grafana_exprs():
        named |= set(NAMES.findall(expr))
    assert named
    for name in named:
        assert _family(name) in served, name
        if name.startswith("narad_"):
            assert _family(name) in docs, name
