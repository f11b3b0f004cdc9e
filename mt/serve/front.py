"""The asyncio side of a translation: check, queue, await the answer (bounded in time, dropped if the client leaves).

Nothing here decodes: the event loop only counts pieces (for the batch cost and the length limit) and
waits on a future the decoding worker resolves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from starlette.requests import Request

from mt.errors import UserError
from mt.serve.batching import BatchFailed, BatchingWorker, Job, QueueFull
from mt.serve.engine import Engine, Options, Output, rows_per_line
from mt.serve.limits import line_costs
from mt.serve.metrics import Metrics
from mt.serve.problems import ApiError, bad_request
from mt.serve.settings import ServeSettings


class ClientLeft(Exception):
    """The client closed the connection before its answer was ready (nothing can be sent)."""


@dataclass
class Front:
    """What a route needs to translate: the engine (for cheap checks), the worker, the limits, the metrics."""

    engine: Engine
    worker: BatchingWorker
    settings: ServeSettings
    metrics: Metrics

    def check_ready(self) -> None:
        if self.worker.warmup_error is not None:
            raise ApiError(500, f"Cannot translate text: the warm-up translation failed: {self.worker.warmup_error}")
        if not self.worker.ready.is_set():
            raise ApiError(503, "the model is warming up; retry shortly", {"Retry-After": "1"})

    def job(self, lines: Sequence[str], options: Options, target: str | None = None,
            align: Sequence[bool] | None = None) -> Job:
        """A job for ``lines`` into ``target`` (a tag language, or None): options resolved (400 if invalid),
        lengths checked, its batch cost counted."""
        try:
            cfg = self.engine.settings(options)
        except UserError as e:
            raise bad_request(f"Invalid request: {e}") from None
        if cfg.strategy == "beam" and cfg.beam_size > self.settings.max_beam:
            raise bad_request(f"beam {cfg.beam_size} is more than --max-beam {self.settings.max_beam}")
        cost = sum(line_costs(self.engine, lines, rows_per_line(cfg), target))
        loop = asyncio.get_running_loop()
        return Job(list(lines), options, cost, cfg.strategy != "sample", loop, loop.create_future(), target, align)

    async def translate(
        self, request: Request, lines: Sequence[str], options: Options, target: str | None = None,
        align: Sequence[bool] | None = None,
    ) -> list[Output]:
        """The outputs of ``lines`` (into ``target``, a tag language or None) in order, the ``align`` ones with
        their word links; ApiError for a refusal (429, 500, 504), ClientLeft if the client left."""
        self.check_ready()
        if not lines:
            return []
        job = self.job(lines, options, target, align)
        try:
            self.worker.submit(job)
        except QueueFull as e:
            raise ApiError(429, f"Slowdown: {e}", {"Retry-After": str(e.retry_after)}) from None
        self.metrics.queue_depth.observe(self.worker.depth())
        return await self.answer(request, job)

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
