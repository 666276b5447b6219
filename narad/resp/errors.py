"""The two ways a client's bytes can end a connection.

Owns: the exceptions raised by the request parsers. Must never: carry command
errors (wrong arguments, WRONGTYPE, ...): those are replies and the connection
lives on; they are `narad.resp.replies.ErrorReply` values, not exceptions.
"""

from __future__ import annotations


class ProtocolError(Exception):
    """The client sent bytes that are not a request. Reply, then close.

    `message` is Redis 7.0's text without the leading "ERR " (for example
    "Protocol error: invalid bulk length"); the server answers
    ``-ERR <message>`` and closes the connection once the reply is written,
    as Redis does.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class QueryBufferLimit(Exception):
    """The client holds more unparsed bytes than the limit. Close, no reply.

    Redis logs "Closing client that reached max query buffer length" and frees
    the client without answering; the server does the same.
    """

    def __init__(self, held_bytes: int, limit_bytes: int) -> None:
        super().__init__(
            f"client reached max query buffer length ({held_bytes} > {limit_bytes} bytes)"
        )
        self.held_bytes = held_bytes  # bytes the parser would hold with the refused data
        self.limit_bytes = limit_bytes  # the max_query_buffer it was created with
