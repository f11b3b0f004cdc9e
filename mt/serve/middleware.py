"""Pure ASGI middleware: the body size limit and per-route request metrics (no blocking, no body buffering)."""

from __future__ import annotations

import json
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mt.serve.metrics import Metrics
from mt.serve.problems import ApiError

ROUTES = ("/", "/health", "/metrics", "/languages", "/translate", "/v1/translate", "/docs", "/openapi.json")


class BodyTooLarge(ApiError):
    """Raised from ``receive`` inside the endpoint, so the app's ApiError handler answers it (413)."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"request body over --max-body-bytes {max_bytes}")


async def send_error(send: Send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode("utf-8")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """413 for a body over ``max_bytes``: at once from Content-Length, else as soon as the stream passes it."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await send_error(send, 413, BodyTooLarge(self.max_bytes).message)
            return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            incoming = await receive()
            if incoming["type"] == "http.request":
                seen += len(incoming.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return incoming

        async def tracking_send(outgoing: Message) -> None:
            nonlocal started
            started = started or outgoing["type"] == "http.response.start"
            await send(outgoing)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge as e:  # raised outside an endpoint's handlers
            if not started:
                await send_error(send, 413, e.message)


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
            route = scope["path"] if scope["path"] in ROUTES else "other"
            self.metrics.observe_request(route, status, time.monotonic() - start)
