"""Pure ASGI middleware: the body size limits and per-route request metrics (no blocking, no body buffering)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mt.serve.metrics import Metrics
from mt.serve.problems import ApiError

ROUTES = (
    "/", "/health", "/metrics", "/languages", "/translate", "/translate_file", "/download_file", "/frontend/settings",
    "/v1/translate", "/docs", "/openapi.json",
)
DRAIN_BYTES = 64 * 2**20  # how far past its limit a refused body is read (and dropped) so the client sees the 413


@dataclass(frozen=True)
class Limit:
    """A body limit and the 413's message (naming the flag that sets it)."""

    max_bytes: int
    message: str


class BodyTooLarge(ApiError):
    """Raised from ``receive`` inside the endpoint, so the app's ApiError handler answers it (413)."""

    def __init__(self, limit: Limit) -> None:
        super().__init__(413, limit.message)


def route_name(path: str) -> str:
    """The route a path counts under in the metrics: a known one (each download as ``/download_file``) or other."""
    if path.startswith("/download_file/"):
        return "/download_file"
    return path if path in ROUTES else "other"


async def send_error(send: Send, status: int, message: str, close: bool = False) -> None:
    body = json.dumps({"error": message}).encode("utf-8")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def drain(receive: Receive, budget: int) -> bool:
    """Read and drop the rest of the request body, at most ``budget`` bytes; True if it ended within them.

    A client that sends its whole body before reading the answer (Python's urllib, which also asks the
    server to close the connection after it) would otherwise find the connection closed under its unsent
    body and report a reset instead of the 413.
    """
    while budget >= 0:
        message = await receive()
        if message["type"] != "http.request":
            return True  # the client left
        budget -= len(message.get("body", b""))
        if not message.get("more_body", False):
            return budget >= 0
    return False


class BodyLimit:
    """413 for a body over its route's limit: at once from Content-Length, else as soon as the stream passes it.

    ``limit`` holds for every route but those in ``routes`` (by path: /translate_file's upload has its own).
    Before the 413 the rest of the body is read and dropped, up to ``DRAIN_BYTES`` past the limit (see
    ``drain``); for a larger body, and for a client that waits for ``100 Continue`` before sending its body
    (curl), the 413 closes the connection instead.
    """

    def __init__(self, app: ASGIApp, limit: Limit, routes: dict[str, Limit] | None = None) -> None:
        self.app, self.limit, self.routes = app, limit, routes or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.routes.get(scope["path"], self.limit)
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit.max_bytes:
            waits = headers.get(b"expect", b"").lower() == b"100-continue"  # nothing sent yet: nothing to drain
            bound = limit.max_bytes + DRAIN_BYTES
            drained = not waits and int(declared) <= bound and await drain(receive, bound)
            await send_error(send, 413, BodyTooLarge(limit).message, close=not drained)
            return
        seen = 0
        started = False
        closing = False

        async def limited_receive() -> Message:
            nonlocal seen, closing
            incoming = await receive()
            if incoming["type"] == "http.request":
                seen += len(incoming.get("body", b""))
                if seen > limit.max_bytes:
                    if incoming.get("more_body", False):
                        closing = not await drain(receive, DRAIN_BYTES)
                    raise BodyTooLarge(limit)
            return incoming

        async def tracking_send(outgoing: Message) -> None:
            nonlocal started
            if outgoing["type"] == "http.response.start":
                started = True
                if closing:
                    outgoing = {**outgoing, "headers": [*outgoing.get("headers", []), (b"connection", b"close")]}
            await send(outgoing)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge as e:  # raised outside an endpoint's handlers
            if not started:
                await send_error(send, 413, e.message, close=closing)


class RequestMetrics:
    """Counts every HTTP request by route (known routes, else ``other``) and status, and times it."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.monotonic(), 500

        async def recording_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        finally:
            self.metrics.observe_request(route_name(scope["path"]), status, time.monotonic() - start)
