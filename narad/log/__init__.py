"""The storage floor: segment logs on local disk (docs/log-format.md)."""

from narad.log.format import FLAG_ENTRY, Record, decode_fields, encode_fields
from narad.log.log import FsyncPolicy, Log, LogConfig, LogFailed
from narad.log.opening import LogCorrupted
from narad.log.segment import CorruptSegment

__all__ = [
    "FLAG_ENTRY",
    "CorruptSegment",
    "FsyncPolicy",
    "Log",
    "LogConfig",
    "LogCorrupted",
    "LogFailed",
    "Record",
    "decode_fields",
    "encode_fields",
]
