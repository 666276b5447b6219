"""JSON Schema for queues and streams: checking schemas, validating produced documents,
comparing versions, and the registry of versions per key.

Pure state and computation: nothing here touches sockets or logs. The server logs the
registry's ops in the metadata log and maps the errors of `errors.py` to replies.
The compatibility checker, `narad.schema.compat`, is imported where it is used, and
the names below load with their modules on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

# Each name of the public API and the module that holds it, loaded on first use: the
# server imports the light modules (errors, modes, keyspace) at start and the engine
# (registry, validation, payload parsing) with the first schema.
_HOMES = {
    "IncompatibleError": "errors",
    "PayloadError": "errors",
    "SchemaError": "errors",
    "DEFAULT_MODE": "modes",
    "Mode": "modes",
    "parse_mode": "modes",
    "parse_json": "payload",
    "validate_fields": "payload",
    "validate_payload": "payload",
    "Active": "registry",
    "Op": "registry",
    "Registry": "registry",
    "Subject": "registry",
    "Version": "registry",
    "Validator": "validate",
    "Violation": "validate",
    "compile": "validate",
    "load": "validate",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
