"""``create_app(engine, settings)``: the FastAPI app around one engine, its decoding worker and its metrics.

The worker thread starts with the app (warm-up first: /health answers 200 after it) and stops after
the server stopped taking requests and answered those it had (uvicorn's graceful shutdown on SIGTERM):
every queued job is decoded before the process exits. The store of translated files (``files.FileStore``)
opens with the app and is removed, files and directory, when it stops. Errors map to LibreTranslate's
``{"error": ...}`` bodies in one place.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from mt.decode.processes import usable_cores
from mt.serve.batching import BatchingWorker
from mt.serve.engine import Engine
from mt.serve.file_routes import router as file_router
from mt.serve.files import FileStore
from mt.serve.front import Front
from mt.serve.metrics import Metrics
from mt.serve.middleware import BodyLimit, Limit, RequestMetrics
from mt.serve.models import ModelSet, ModelSpec, ServedModel
from mt.serve.problems import ApiError
from mt.serve.routes import router
from mt.serve.routing import Languages, model_name
from mt.serve.settings import ServeSettings

log = logging.getLogger("mt.serve")
FORM_ROOM = 64 * 1024  # what a /translate_file body holds besides the file: multipart headers, the other fields


def error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def add_error_handlers(app: FastAPI) -> None:
    """Every refusal as ``{"error": "..."}``; an unexpected exception is a logged 500, never a dead worker."""

    @app.exception_handler(ApiError)
    async def api_error(request: Request, e: ApiError) -> JSONResponse:
        return error(e.status, e.message, e.headers)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, e: HTTPException) -> JSONResponse:
        return error(e.status_code, str(e.detail), getattr(e, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, e: RequestValidationError) -> JSONResponse:
        first = e.errors()[0] if e.errors() else {"loc": (), "msg": "invalid"}
        return error(400, f"Invalid request: {'.'.join(str(p) for p in first['loc'])}: {first['msg']}")

    @app.exception_handler(Exception)
    async def unexpected(request: Request, e: Exception) -> JSONResponse:
        log.exception("unexpected error in %s %s", request.method, request.url.path)
        return error(500, f"Cannot translate text: internal error ({type(e).__name__})")


def body_limits(settings: ServeSettings) -> tuple[Limit, dict[str, Limit]]:
    """The body limit of every route, and of the routes with their own: /translate_file's upload, which
    --max-body-bytes never cuts below --max-file-bytes."""
    file_limit = max(settings.max_body_bytes, settings.max_file_bytes + FORM_ROOM)
    every = Limit(settings.max_body_bytes, f"request body over --max-body-bytes {settings.max_body_bytes}")
    return every, {"/translate_file": Limit(file_limit, f"file over --max-file-bytes {settings.max_file_bytes}")}


def one_model(engine: Engine) -> ModelSet:
    """A set of the one engine given (loaded), named by its languages."""
    languages = Languages(model_name(engine.source_lang, engine.target_langs), engine.source_lang,
                          tuple(engine.target_langs), engine.tagged)
    return ModelSet([ServedModel(ModelSpec(languages, lambda: engine, what=engine.description), engine)])


def create_app(models: ModelSet | Engine, settings: ServeSettings) -> FastAPI:
    """The app serving ``models`` (or one engine); its decoding worker runs while the app's lifespan does.
    ``app.state.front.reload(specs)`` serves a new model list (mt-serve calls it on SIGHUP)."""
    if not isinstance(models, ModelSet):
        models = one_model(models)
    metrics = Metrics()
    for model in models.loaded():
        metrics.observe_load(model, [])
    worker = BatchingWorker(
        models,
        max_batch_tokens=settings.max_batch_tokens,
        max_wait_s=settings.max_wait_ms / 1000,
        max_queue=settings.max_queue,
        threads=settings.threads or usable_cores(),
        fill=settings.fill,
        on_batch=metrics.observe_batch,
        on_load=metrics.observe_load,
    )

    files = FileStore(settings.file_ttl_s, settings.max_stored_bytes)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        files.open()
        worker.start()
        try:
            yield
        finally:
            await asyncio.to_thread(worker.stop)  # decodes what is still queued, then the thread ends
            files.close()

    app = FastAPI(
        title="mt-serve",
        # no model path: it is public
        summary=f"Machine translation ({models.router.describe()})",
        description="LibreTranslate-compatible `/translate`, `/translate_file`, `/languages` and `/frontend/settings`, "
        "mt's `/v1/translate` with decoding options, `/health`, Prometheus `/metrics`. Lines of concurrent requests "
        "are decoded together.",
        lifespan=lifespan,
    )
    app.state.front = Front(models, worker, settings, metrics)
    app.state.metrics = metrics
    app.state.files = files
    every, own = body_limits(settings)
    app.add_middleware(BodyLimit, limit=every, routes=own)
    app.add_middleware(RequestMetrics, metrics=metrics)
    add_error_handlers(app)
    app.include_router(router)
    app.include_router(file_router)
    return app
