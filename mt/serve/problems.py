"""``ApiError``: a request the server refuses, with its HTTP status and LibreTranslate's ``{"error": ...}`` body."""

from __future__ import annotations


class ApiError(Exception):
    """A refused request: ``status`` (400, 403, 413, 429, 500, 503, 504), the one-line ``message``, extra headers."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)
