"""Produce throughput with and without a schema, through a real Narad server.

    python bench/schema_produce.py [--fsync always|everysec|no] [--requests N]
                                   [--rounds R] [--only CASE ...]

One server is started fresh (temp folder, free loopback port). For each case, two
keys are made the same way and one of them gets a realistic 10-field schema; then
redis-benchmark drives the same produce command at each key in turn, `--rounds`
times, alternating, and the median throughput of each side is reported with their
ratio (target: validated >= 0.7x unvalidated). Results print as a Markdown table
for bench/README.md. Needs redis-benchmark on the PATH.

Cases (CASES below; add one to measure another produce path):

- xadd-fields: `XADD key * <10 field/value pairs>`, the schema judging the object of
  strings the pairs form.
- xadd-field: `XADD key * doc <10-field JSON order>`, the schema set with FIELD doc:
  the JSON document is parsed and validated, the work Q.PUSH does per payload.
- q.push: `Q.PUSH key <10-field JSON order>`; run only when the server has Q.PUSH.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_schema import ORDER, ORDER_SCHEMA  # noqa: E402
from tests.server.raw import Raw  # noqa: E402
from tests.servers import NaradProcess  # noqa: E402

# A flat order: ten string fields, as an XADD entry carries them.
FLAT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["id", "customer", "amount", "currency", "created_ms", "sku", "qty"],
    "properties": {
        "id": {"type": "string", "pattern": "^ord_[a-z0-9]{8,32}$"},
        "customer": {"type": "string", "minLength": 1, "maxLength": 64},
        "amount": {"type": "string", "pattern": "^[0-9]+(\\.[0-9]{1,2})?$"},
        "currency": {"enum": ["EUR", "USD", "GBP", "INR"]},
        "created_ms": {"type": "string", "pattern": "^[0-9]{13}$"},
        "sku": {"type": "string", "pattern": "^[A-Z]+-[0-9]+$"},
        "qty": {"type": "string", "pattern": "^[1-9][0-9]{0,3}$"},
        "express": {"enum": ["true", "false"]},
        "note": {"type": "string", "maxLength": 500},
        "city": {"type": "string", "maxLength": 100},
    },
    "additionalProperties": False,
}
FLAT_ORDER = {
    "id": "ord_8f3k2j1m9x",
    "customer": "alice",
    "amount": "129.50",
    "currency": "EUR",
    "created_ms": "1700000000000",
    "sku": "A-1",
    "qty": "2",
    "express": "true",
    "note": "leave at the door",
    "city": "Pune",
}
ORDER_JSON = json.dumps(ORDER)


@dataclass
class Case:
    """One produce path: how to make a key, the Q.SCHEMA SET options, the command
    (`{key}` stands for the key) and the command the server must know."""

    name: str
    command: list[str]
    make: list[list[str]] = field(default_factory=lambda: [["XADD", "{key}", "*", "seed", "1"]])
    schema: str = json.dumps(FLAT_SCHEMA)
    schema_options: list[str] = field(default_factory=list)
    needs: str = "XADD"


CASES = [
    Case(
        "xadd-fields",
        ["XADD", "{key}", "*", *[s for pair in FLAT_ORDER.items() for s in pair]],
    ),
    Case(
        "xadd-field",
        ["XADD", "{key}", "*", "doc", ORDER_JSON],
        schema=json.dumps(ORDER_SCHEMA),
        schema_options=["FIELD", "doc"],
    ),
    Case(
        "q.push",
        ["Q.PUSH", "{key}", ORDER_JSON],
        make=[["Q.CREATE", "{key}"]],
        schema=json.dumps(ORDER_SCHEMA),
        needs="Q.PUSH",
    ),
]


def benchmark(port: int, clients: int, pipeline: int, requests: int, command: list[str]) -> float:
    """Requests per second (the JSON in the command would garble --csv's test name)."""
    out = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-c", str(clients), "-n", str(requests),
         "-P", str(pipeline), "-q", *command],
        capture_output=True, text=True, check=True,
    ).stdout
    return float(re.findall(r"([0-9.]+) requests per second", out)[-1])


def fill(args: list[str], key: str) -> list[str]:
    return [key if a == "{key}" else a for a in args]


def run_case(server: NaradProcess, case: Case, args: argparse.Namespace) -> dict[str, Any] | None:
    client = redis.Redis(port=server.port)
    with Raw(server.port) as raw:  # redis-py reshapes COMMAND replies
        if raw.call("COMMAND", "INFO", case.needs) == [None]:
            return None
    plain, checked = f"{case.name}:plain", f"{case.name}:schema"
    for key in (plain, checked):
        for command in case.make:
            client.execute_command(*fill(command, key))
    client.execute_command("Q.SCHEMA", "SET", checked, case.schema, *case.schema_options)
    # The command must be accepted on both keys, or the benchmark measures refusals.
    for key in (plain, checked):
        client.execute_command(*fill(case.command, key))
    rates: dict[str, dict[int, list[float]]] = {plain: {}, checked: {}}
    for pipeline in args.pipelines:
        for _ in range(args.rounds):
            for key in (plain, checked):
                rate = benchmark(server.port, args.clients, pipeline, args.requests,
                                 fill(case.command, key))
                rates[key].setdefault(pipeline, []).append(rate)
    return {
        pipeline: (statistics.median(rates[plain][pipeline]),
                   statistics.median(rates[checked][pipeline]))
        for pipeline in args.pipelines
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fsync", default="always", choices=["always", "everysec", "no"])
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--pipelines", type=int, nargs="+", default=[16, 1])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", nargs="+", default=None)
    args = parser.parse_args()
    print(f"fsync {args.fsync}, {args.clients} clients, {args.requests} requests per run, "
          f"median of {args.rounds} runs")
    print("| case | pipeline | unvalidated (ops/s) | validated (ops/s) | ratio |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        server = NaradProcess(Path(tmp) / "narad", ["--fsync", args.fsync])
        server.start()
        try:
            for case in CASES:
                if args.only and case.name not in args.only:
                    continue
                result = run_case(server, case, args)
                if result is None:
                    print(f"| {case.name} | - | (the server has no {case.needs}) | | |")
                    continue
                for pipeline, (plain, checked) in result.items():
                    print(f"| {case.name} | {pipeline} | {plain:,.0f} | {checked:,.0f} "
                          f"| {checked / plain:.2f} |", flush=True)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
