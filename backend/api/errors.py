"""Every error is JSON `{code, message, errors[], details{}}` (schemas.common.ErrorOut)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from ..errors import ApiError
from ..schemas.common import ErrorOut, FieldError

log = logging.getLogger("spindle.api")

_CODES = {
    404: "not_found",
    405: "method_not_allowed",
    401: "unauthorized",
    413: "payload_too_large",
}


def _json(status: int, body: ErrorOut, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


def install(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api(_: Request, e: ApiError) -> JSONResponse:
        body = ErrorOut(
            code=e.code,
            message=e.message,
            errors=[FieldError(field=f, message=m) for f, m in e.errors],
            details=e.details,
        )
        headers = {"WWW-Authenticate": "Bearer"} if e.status == 401 else None
        return _json(e.status, body, headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        errors = [
            FieldError(
                # A JSON syntax error's location is a character offset, not a field.
                field="(body)"
                if err.get("type") == "json_invalid"
                else ".".join(str(x) for x in err.get("loc", ()) if x != "body") or "(body)",
                message=str(err.get("msg", "invalid")),
            )
            for err in e.errors()
        ]
        return _json(
            422, ErrorOut(code="invalid_request", message="invalid request", errors=errors)
        )

    @app.exception_handler(HTTPException)
    async def _http(_: Request, e: HTTPException) -> JSONResponse:
        if e.status_code == 400:
            # FastAPI's answer to a body it cannot decode (not UTF-8 JSON): a client's
            # mistake with the request, reported like every other.
            message = f"the request body is not valid UTF-8 JSON ({e.detail})"
            body = ErrorOut(
                code="invalid_request",
                message=message,
                errors=[FieldError(field="(body)", message=message)],
            )
            return _json(422, body)
        code = _CODES.get(e.status_code, "http_error")
        return _json(e.status_code, ErrorOut(code=code, message=str(e.detail)), e.headers)

    @app.exception_handler(Exception)
    async def _bug(request: Request, e: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return _json(500, ErrorOut(code="internal", message="internal error; see the server log"))
