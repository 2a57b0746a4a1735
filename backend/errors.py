"""Errors the services raise for a client's mistake; the API turns each into JSON with its
stable `code` and HTTP status. Anything else reaching the client is a bug (a 500)."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    status = 400
    code = "bad_request"

    def __init__(
        self,
        message: str,
        *,
        errors: list[tuple[str, str]] | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.errors = errors or []
        self.details = details or {}


class NotFound(ApiError):
    status = 404
    code = "not_found"


class Conflict(ApiError):
    status = 409
    code = "conflict"


class InvalidSpec(ApiError):
    status = 422
    code = "invalid_spec"


class InvalidInput(ApiError):
    status = 422
    code = "invalid_input"


class TooLarge(ApiError):
    status = 413
    code = "payload_too_large"


class Unauthorized(ApiError):
    status = 401
    code = "unauthorized"


class Forbidden(ApiError):
    status = 403
    code = "forbidden"


class StateUnavailable(ApiError):
    """Stored state the request needs cannot be read (a corrupt or missing file): not the
    client's mistake, and never answered with a wrong (say, empty) result instead."""

    status = 503
    code = "state_unavailable"


__all__ = [
    "ApiError",
    "Conflict",
    "Forbidden",
    "InvalidInput",
    "InvalidSpec",
    "NotFound",
    "StateUnavailable",
    "TooLarge",
    "Unauthorized",
]
