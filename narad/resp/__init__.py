"""RESP, the Redis protocol, sans I/O: request parsing and reply encoding.

Bytes in, commands out (`RequestParser`); reply values in, bytes out (`encode`,
`encode_into`). Nothing here touches a socket; narad/connection.py does.
"""

from narad.resp.encoder import encode, encode_into, encode_request
from narad.resp.errors import ProtocolError, QueryBufferLimit
from narad.resp.parser import (
    DEFAULT_MAX_BULK_LEN,
    DEFAULT_MAX_INLINE_LEN,
    DEFAULT_MAX_MULTIBULK_LEN,
    DEFAULT_MAX_QUERY_BUFFER,
    HiredisRequestParser,
    PurePythonRequestParser,
    RequestParser,
)
from narad.resp.replies import (
    NULL_ARRAY,
    OK,
    PONG,
    QUEUED,
    BigNumber,
    Encoded,
    ErrorReply,
    NullArray,
    Push,
    Reply,
    SimpleString,
    Verbatim,
)

__all__ = [
    "DEFAULT_MAX_BULK_LEN",
    "DEFAULT_MAX_INLINE_LEN",
    "DEFAULT_MAX_MULTIBULK_LEN",
    "DEFAULT_MAX_QUERY_BUFFER",
    "NULL_ARRAY",
    "OK",
    "PONG",
    "QUEUED",
    "BigNumber",
    "Encoded",
    "ErrorReply",
    "HiredisRequestParser",
    "NullArray",
    "ProtocolError",
    "PurePythonRequestParser",
    "Push",
    "QueryBufferLimit",
    "Reply",
    "RequestParser",
    "SimpleString",
    "Verbatim",
    "encode",
    "encode_into",
    "encode_request",
]
