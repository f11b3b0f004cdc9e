"""The asyncio side of a translation: check, queue, await the answer (bounded in time, dropped if the client leaves).

Nothing here decodes or loads: the event loop only counts pieces (for the batch cost and the length
limit) and waits on a future the decoding worker resolves (a translation, or a model loaded on its thread).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

from starlette.requests import Request

from mt.errors import UserError
from mt.serve.batching import BatchFailed, BatchingWorker, Job, QueueFull
from mt.serve.engine import Engine, Options, Output, rows_per_line
from mt.serve.limits import line_costs
from mt.serve.metrics import Metrics
from mt.serve.models import ModelSet, ModelSpec, ServedModel
from mt.serve.problems import ApiError, bad_request
from mt.serve.settings import ServeSettings


class ClientLeft(Exception):
    """The client closed the connection before its answer was ready (nothing can be sent)."""


@dataclass
class Front:
    """What a route needs to translate: the models (their routing, engines for cheap checks), the worker,
    the limits, the metrics, and the language identifier once built."""

    models: ModelSet
    worker: BatchingWorker
    settings: ServeSettings
    metrics: Metrics
    identifier: object | None = None  # mt.document.language.LanguageIdentifier over the models' sources

    def swap(self, models: ModelSet) -> None:
        """Serve ``models`` from now on (a reload): new requests route over them; queued jobs finish on
        the engines they were queued with."""
        for gone in {m.name for m in self.models.models} - {m.name for m in models.models}:
            self.metrics.resident.labels(gone).set(0)
        self.models = self.worker.models = models
        self.identifier = None

    def reload(self, specs: Sequence[ModelSpec], lazy: bool = False) -> ModelSet:
        """Serve the models ``specs`` name (SIGHUP; blocking: run it off the event loop). A model whose name and
        identity did not change keeps its engine; the others load on the worker (unless ``lazy``) before the
        new set replaces the old one, so no request waits for them; requests already queued finish on the
        old engines. A model that fails to load leaves the old set in place and raises."""
        models = self.models.successor(specs, self.models.max_loaded)
        if not lazy:
            for model in models.loaded_at_start():
                if model.engine is None:
                    self.worker.load(model, models).result()
        self.swap(models)
        return models

    def check_ready(self) -> None:
        if self.worker.warmup_error is not None:
            raise ApiError(500, f"Cannot translate text: the warm-up translation failed: {self.worker.warmup_error}")
        if not self.worker.ready.is_set():
            raise ApiError(503, "the model is warming up; retry shortly", {"Retry-After": "1"})

    async def engine(self, model: ServedModel) -> Engine:
        """``model``'s engine, loaded by the worker first if it is not (a lazy model, or one unloaded)."""
        self.models.touch(model)
        engine = model.engine
        if engine is not None:
            return engine
        try:
            engine = await asyncio.wrap_future(self.worker.load(model))
        except Exception as e:  # noqa: BLE001  (the load's own error, to the client that waited for it)
            raise ApiError(500, f"Cannot translate text: loading model {model.name} failed: {e}") from None
        return engine

    def job(self, model: ServedModel, engine: Engine, lines: Sequence[str], options: Options,
            target: str | None = None, align: Sequence[bool] | None = None, source: str | None = None) -> Job:
        """A job for ``lines`` into ``target`` (a tag language, or None) from ``source`` (the code of a model with
        language codes, or None): options resolved (400 if invalid), lengths checked, its batch cost counted."""
        try:
            cfg = engine.settings(options)
        except UserError as e:
            raise bad_request(f"Invalid request: {e}") from None
        if cfg.strategy == "beam" and cfg.beam_size > self.settings.max_beam:
            raise bad_request(f"beam {cfg.beam_size} is more than --max-beam {self.settings.max_beam}")
        cost = sum(line_costs(engine, lines, rows_per_line(cfg), target))
        loop = asyncio.get_running_loop()
        return Job(list(lines), options, cost, cfg.strategy != "sample", loop, loop.create_future(), model, engine,
                   target, align, source)

    async def translate(
        self, request: Request, model: ServedModel, lines: Sequence[str], options: Options,
        target: str | None = None, align: Sequence[bool] | None = None, source: str | None = None,
    ) -> list[Output]:
        """The outputs of ``lines`` by ``model`` (into ``target``, a tag language or None; from ``source``, a code
        or None: ``job``) in order, the ``align`` ones with their word links; ApiError for a refusal (429, 500,
        504), ClientLeft if the client left."""
        self.check_ready()
        if not lines:
            return []
        engine = await self.engine(model)
        job = self.job(model, engine, lines, options, target, align, source)
        try:
            self.worker.submit(job)
        except QueueFull as e:
            raise ApiError(429, f"Slowdown: {e}", {"Retry-After": str(e.retry_after)}) from None
        self.metrics.queue_depth.observe(self.worker.depth())
        try:
            return await self.answer(request, job)
        finally:
            self.metrics.observe_job(model.name, time.monotonic() - job.queued_at)

    async def answer(self, request: Request, job: Job) -> list[Output]:
        left = asyncio.ensure_future(wait_for_disconnect(request))
        try:
            done, _ = await asyncio.wait(
                {job.future, left}, timeout=self.settings.timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            left.cancel()
        if job.future in done:
            try:
                return job.future.result()
            except BatchFailed as e:
                raise ApiError(500, f"Cannot translate text: {e}") from None
        job.future.cancel()  # the worker skips it, or drops its answer if its batch already runs
        if left in done:
            raise ClientLeft
        raise ApiError(504, f"translation took more than --timeout {self.settings.timeout_s:g} s")


async def wait_for_disconnect(request: Request) -> None:
    """Return when the client closes the connection (the body was read already: the next message is that)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
