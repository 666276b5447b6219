"""The pages of a data node's metrics port: what each path answers, and who may ask.

- `GET /metrics`: narad/collectors.py's exposition, in the Prometheus text format,
  or OpenMetrics when the Accept header asks for it.
- `GET /`: the dashboard (narad/dashboard.html), a page that polls `/api/state`.
- `GET /api/state`: the node's figures as JSON, for the dashboard
  (narad/dashboard.py).

Who may ask (`metrics-auth`, docs/operations.md): while a new connection would
have to log in (requirepass is set, or the default user is off or has passwords),
`users` asks for HTTP Basic credentials of an enabled user that may run INFO, and
answers 401 without them (403 for a user who may not run INFO); `none` serves
whoever reaches the port. A node whose clients need no login serves everyone.
Every page is read-only.
"""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING

from narad import dashboard
from narad.acl.check import check
from narad.collectors import Exposition
from narad.commands.table import COMMANDS
from narad.metrics_http import Request, Response, text

if TYPE_CHECKING:
    from narad.node import Node

REALM = 'Basic realm="narad", charset="UTF-8"'


class NodeSite:
    """The node's pages (module doc); called by narad/metrics_http.py per request."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.exposition = Exposition(node)

    def __call__(self, request: Request) -> Response:
        refused = self.refusal(request)
        if refused is not None:
            return refused
        if request.path == "/metrics":
            body, content_type = self.exposition.scrape(request.headers.get("accept"))
            return Response(200, body, content_type)
        keys = self.exposition.keys
        if request.path == "/":
            return Response(200, dashboard.page(self.node, keys), "text/html; charset=utf-8")
        if request.path == "/api/state":
            return Response(200, dashboard.state_json(self.node, keys), "application/json")
        return text(404, f"no page at {request.path}: try /, /metrics or /api/state")

    def refusal(self, request: Request) -> Response | None:
        """None when the request may be answered (module doc), else the 401/403."""
        node = self.node
        if node.config["metrics-auth"] == "none" or node.acl.users.default_logs_in():
            return None
        credentials = _basic(request.headers.get("authorization", ""))
        if credentials is None:
            return _unauthorized("credentials needed: HTTP Basic, a user of this node")
        name, password = credentials
        user = node.acl.users.authenticate(name, password)
        if user is None:
            return _unauthorized("invalid username-password pair or user is disabled")
        info = COMMANDS[b"info"]
        assert info.acl is not None
        if check(user, info.acl, [b"info"], []) is not None:
            return text(403, f"user {user.name} has no permissions to run the 'info' command")
        return None


def _unauthorized(message: str) -> Response:
    response = text(401, message)
    response.headers.append(("WWW-Authenticate", REALM))
    return response


def _basic(header: str) -> tuple[bytes, bytes] | None:
    """(user, password) from an `Authorization: Basic ...` header, else None."""
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        raw = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    name, colon, password = raw.partition(b":")
    return (name, password) if colon else None
