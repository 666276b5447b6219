"""JSON Schema for queues and streams: checking schemas, validating produced documents,
comparing versions, and the registry of versions per key.

Pure state and computation: nothing here touches sockets or logs. The server logs the
registry's ops in the metadata log and maps the errors of `errors.py` to replies.
The compatibility checker, `narad.schema.compat`, is imported where it is used.
"""

from narad.schema.errors import IncompatibleError, PayloadError, SchemaError
from narad.schema.modes import DEFAULT_MODE, Mode, parse_mode
from narad.schema.payload import parse_json, validate_fields, validate_payload
from narad.schema.registry import Active, Op, Registry, Subject, Version
from narad.schema.validate import Validator, Violation, compile, load

__all__ = [
    "DEFAULT_MODE",
    "Active",
    "IncompatibleError",
    "Mode",
    "Op",
    "PayloadError",
    "Registry",
    "SchemaError",
    "Subject",
    "Validator",
    "Version",
    "Violation",
    "compile",
    "load",
    "parse_json",
    "parse_mode",
    "validate_fields",
    "validate_payload",
]
