"""Dynamic batching: one worker thread owns the engines and decodes the lines of concurrent requests together.

The asyncio front ``submit``s a ``Job`` (a request's lines, its model and engine, its options, its target
language, its token cost, a future) into its model's queue (all queues together bounded by ``max_queue``)
and awaits the future; it never decodes. The worker serves the models with queued jobs in turn (round
robin: after a batch of model A, every other model with waiting jobs gets a batch before A's next, so a
flood of requests for one model delays another's by at most one batch each). From the chosen model's
queue it takes the oldest job, then gathers later jobs with the same options (the batching key; for a
model with language codes, M2M-100 or NLLB, also the same source language: ``same_batch``) in arrival
order while their cost fits ``max_batch_tokens``, waiting at most ``max_wait_ms`` for more to arrive,
and decodes all their lines in one ``engine.translate`` call, each line with its own job's target (a
model of several target languages reads the target as a tag in the source ids, so jobs for different
targets share a batch). A gather may hold several of the decoder's batches (Marian's
maxi-batch; by default ``GATHER_BATCHES``): the engine sorts its lines by length and decodes them in
batches of similar lengths, which wastes fewer steps than lines in arrival order, and fewer of its
batches run part-full than when each gather is one batch; each job is answered as soon as its own lines
are done (``on_done``), with its outputs in order, through ``loop.call_soon_threadsafe``. mt's decoder
gives a sentence the same output whatever else is in its batch, so an answer does not depend on its
neighbours. Sampling jobs are never merged (the sampling generator's draws depend on the batch). A
failing batch fails its unanswered jobs only; jobs whose client left or timed out before their batch
began are dropped. Between batches the worker loads the models asked for (``load``: a lazy model's first
request, a reload), each warmed up before its first batch.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from mt.serve.engine import Engine, Options, Output
from mt.serve.models import ModelSet, ServedModel

logger = logging.getLogger(__name__)

# the default gather, in decoder batches: at 64 clients it lets a gather take every queued request (the
# served sentences/s were 78% of offline decoding's at one batch a gather, 87% at four; docs/benchmarks.md)
GATHER_BATCHES = 4
WARM_UP_LINE = "a"  # one or two pieces: within any model's length limit


class QueueFull(Exception):
    """The queue holds ``max_queue`` jobs; ``retry_after`` estimates the seconds until it has room."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"the translation queue is full; retry in {retry_after} s")
        self.retry_after = retry_after


class BatchFailed(Exception):
    """The batch holding this job raised; the message is the engine's error."""


@dataclass
class Job:
    """One request's lines waiting for the worker; ``future`` gets ``list[Output]`` in line order."""

    lines: Sequence[str]
    options: Options
    cost: int  # source tokens incl. EOS x rows per sentence
    mergeable: bool  # False: decoded in a batch of its own (sampling)
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    model: ServedModel  # whose queue it waits in
    engine: Engine  # the model's engine when the job was made (an unloaded model's jobs still finish on it)
    target: str | None = None  # the tag language of a model of several targets (None: no tag)
    align: Sequence[bool] | None = None  # per line: give its best translation's word links too
    source: str | None = None  # the source's code for a model with language codes (None: the engine's default)
    queued_at: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class BatchReport:
    """What one decoded batch was, for the metrics."""

    model: str
    jobs: int
    lines: list[Output]
    seconds: float
    failed: bool


class BatchingWorker:
    """The decoding thread, one queue per model, and the models' loading; ``start`` warms the loaded
    models up, ``stop`` drains and joins."""

    def __init__(
        self,
        models: ModelSet,
        *,
        max_batch_tokens: int | None,
        max_wait_s: float,
        max_queue: int,
        threads: int,
        fill: bool = True,
        on_batch: Callable[[BatchReport], None] = lambda report: None,
        on_load: Callable[[ServedModel, list[ServedModel]], None] = lambda model, unloaded: None,
    ) -> None:
        self.models = models  # replaced by ``swap`` (a reload); jobs keep the model they were queued for
        self.max_batch_tokens, self.max_wait_s, self.max_queue = max_batch_tokens, max_wait_s, max_queue
        self.threads, self.fill = threads, fill
        self.on_batch, self.on_load = on_batch, on_load
        self.ready = threading.Event()  # set once the warm-up translations ran
        self.warmup_error: BaseException | None = None
        self._queues: dict[ServedModel, deque[Job]] = {}
        self._turns: deque[ServedModel] = deque()  # models with queued jobs, in round-robin order
        self._gathering: ServedModel | None = None  # the model whose batch is being gathered (not in _turns)
        self._loads: deque[tuple[ServedModel, ModelSet, Future]] = deque()
        self._queued = 0
        self._budgets: weakref.WeakKeyDictionary[Engine, int] = weakref.WeakKeyDictionary()  # an unloaded one goes
        self._cond = threading.Condition()
        self._stopping = False
        self._last_batch_s = 0.0
        self._thread = threading.Thread(target=self._run, name="mt-serve-decoder", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Decode every queued job, then end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join()

    def depth(self) -> int:
        return self._queued

    def submit(self, job: Job) -> None:
        """Queue ``job`` behind its model's; QueueFull when ``max_queue`` jobs wait already."""
        with self._cond:
            if self._queued >= self.max_queue:
                raise QueueFull(max(1, math.ceil(self._last_batch_s)))  # room comes back as a batch ends
            self._queues.setdefault(job.model, deque()).append(job)
            if job.model is not self._gathering and job.model not in self._turns:
                self._turns.append(job.model)
            self._queued += 1
            self._cond.notify_all()

    def load(self, model: ServedModel, models: ModelSet | None = None) -> Future:
        """Load ``model`` of ``models`` (default: the served set) on the worker's thread, between batches
        (warmed up; the set's models beyond its ``max_loaded`` unloaded); the future gets its engine."""
        future: Future = Future()
        with self._cond:
            self._loads.append((model, models or self.models, future))
            self._cond.notify_all()
        return future

    def budget(self, engine: Engine) -> int:
        """Source tokens (x beam) one gather may take for ``engine`` (its defaults resolved once)."""
        if self.max_batch_tokens:
            return self.max_batch_tokens
        if engine not in self._budgets:
            self._budgets[engine] = GATHER_BATCHES * engine.settings(Options()).max_tokens
        return self._budgets[engine]

    def _run(self) -> None:
        import torch

        torch.set_num_threads(self.threads)
        try:
            for model in self.models.loaded():
                self._warm_up(model.engine)
        except Exception as e:  # noqa: BLE001  (reported by /health; the server stays up to say why)
            self.warmup_error = e
        else:
            self.ready.set()
        while (work := self._next()) is not None:
            if isinstance(work, tuple):
                self._load(*work)
            else:
                self._decode(work)

    def _warm_up(self, engine: Engine) -> None:
        """One line, then (an engine with ``fill``: mt's) the largest batch, at the length limit."""
        target = warm_up_target(engine)
        engine.translate([WARM_UP_LINE], Options(), [target])
        fill = getattr(engine, "fill", None)
        if fill is not None and self.fill:
            start = time.monotonic()
            lines = fill(self.budget(engine), target)
            logger.info("warm-up: %d lines at the length limit in %.1f s", lines, time.monotonic() - start)

    def _load(self, model: ServedModel, models: ModelSet, future: Future) -> None:
        if future.done():
            return
        try:
            engine = model.engine
            if engine is None:
                start = time.monotonic()
                engine = model.load()
                self._warm_up(engine)
                unloaded = models.unload_beyond_limit(keep=model)
                logger.info("loaded %s in %.1f s%s", model.name, time.monotonic() - start,
                            f"; unloaded {', '.join(m.name for m in unloaded)}" if unloaded else "")
                self.on_load(model, unloaded)
        except Exception as e:  # noqa: BLE001  (the requests waiting for it get the error)
            model.unload()
            future.set_exception(e)
        else:
            future.set_result(engine)

    def _next(self) -> tuple[ServedModel, ModelSet, Future] | list[Job] | None:
        """A model to load, else the next batch (see the module docstring), or None once stopping with
        nothing queued."""
        with self._cond:
            while not self._turns and not self._loads and not self._stopping:
                self._cond.wait()
            if self._loads:
                return self._loads.popleft()
            if not self._turns:
                return None
            model = self._gathering = self._turns.popleft()
            queue = self._queues[model]
            first = queue.popleft()
            self._queued -= 1
            batch, tokens, limit = [first], first.cost, self.budget(first.engine)
            deadline = time.monotonic() + self.max_wait_s
            while first.mergeable:
                tokens, full = self._take_matching(queue, first, batch, tokens, limit)
                remaining = deadline - time.monotonic()
                if full or remaining <= 0 or self._stopping:
                    break
                self._cond.wait(remaining)
            self._gathering = None
            if queue:
                self._turns.append(model)  # its next batch after every other model's (round robin)
            else:
                del self._queues[model]
        return [job for job in batch if not job.future.done()]  # left or timed out meanwhile

    def _take_matching(self, queue: deque[Job], first: Job, batch: list[Job], tokens: int, limit: int
                       ) -> tuple[int, bool]:
        """Move ``queue``'s jobs that may share ``first``'s batch (``same_batch``) into ``batch`` in arrival order
        while they fit ``limit``.

        Returns the new token total and whether the batch is full (a matching job did not fit, or the
        budget is reached). Jobs whose request is gone are dropped from the queue on the way.
        """
        kept: list[Job] = []
        full = tokens >= limit
        for job in queue:
            if job.future.done():
                continue
            if not full and job.mergeable and same_batch(job, first):
                if tokens + job.cost <= limit:
                    batch.append(job)
                    tokens += job.cost
                    continue
                full = True  # keep arrival order: no later, smaller job overtakes this one
            kept.append(job)
        self._queued -= len(queue) - len(kept)
        queue.clear()
        queue.extend(kept)
        return tokens, full or tokens >= limit

    def _decode(self, batch: list[Job]) -> None:
        if not batch:
            return
        lines = [line for job in batch for line in job.lines]
        targets = [job.target for job in batch for _ in job.lines]
        align = [bool(job.align and job.align[k]) for job in batch for k in range(len(job.lines))]
        answers = Answers(batch)
        start = time.monotonic()
        try:
            aligned = {"align": align} if any(align) else {}  # only engines asked to align need to know how
            source = {"source": batch[0].source} if batch[0].source is not None else {}  # a batch has one (same_batch)
            outputs = batch[0].engine.translate(lines, batch[0].options, targets, on_done=answers.lines_done,
                                                **aligned, **source)
            answers.finish(outputs)
        except Exception as e:  # noqa: BLE001  (one bad batch fails its requests, not the server)
            answers.fail(BatchFailed(f"{type(e).__name__}: {e}"))
            outputs, failed = [], True
        else:
            failed = False
        self._last_batch_s = time.monotonic() - start
        self.on_batch(BatchReport(batch[0].model.name, len(batch), outputs, self._last_batch_s, failed))


class Answers:
    """The outputs of one gather's jobs as they come in; a job is answered once all its lines are."""

    def __init__(self, batch: list[Job]) -> None:
        self.jobs = batch
        self.owner = [(j, k) for j, job in enumerate(batch) for k in range(len(job.lines))]  # line -> (job, position)
        self.outputs: list[list[Output | None]] = [[None] * len(job.lines) for job in batch]
        self.missing = [len(job.lines) for job in batch]
        self.answered = [False] * len(batch)

    def lines_done(self, done: list[tuple[int, Output]]) -> None:
        """Record ``(line index in the gather, output)`` pairs; answer the jobs they complete."""
        for i, output in done:
            j, k = self.owner[i]
            if self.outputs[j][k] is None:  # the final call repeats lines already heard of
                self.outputs[j][k] = output
                self.missing[j] -= 1
                if self.missing[j] == 0:
                    self._answer(j, self.outputs[j])

    def finish(self, outputs: list[Output]) -> None:
        """Every line's output: answer what an engine did not report (and jobs without lines)."""
        self.lines_done(list(enumerate(outputs)))
        for j, answered in enumerate(self.answered):
            if not answered:
                self._answer(j, [])

    def fail(self, error: BatchFailed) -> None:
        """Fail every job not answered yet."""
        for j, answered in enumerate(self.answered):
            if not answered:
                self._answer(j, error)

    def _answer(self, j: int, result: list | BaseException) -> None:
        self.answered[j] = True
        _resolve(self.jobs[j], result)


def same_batch(job: Job, first: Job) -> bool:
    """Whether ``job`` may join ``first``'s batch: the same options and engine, and the same source language (a
    model with language codes reads its source's code, and the Translator takes one source a call)."""
    return job.options == first.options and job.engine is first.engine and job.source == first.source


def warm_up_target(engine: Engine) -> str | None:
    """The warm-up line's target: the first of a tagged engine's, else none."""
    return engine.target_langs[0] if engine.tagged else None


def _resolve(job: Job, result: list[Output] | BaseException) -> None:
    """Hand ``result`` to the job's future on its event loop (unless the request is gone)."""

    def settle() -> None:
        if job.future.done():
            return
        if isinstance(result, BaseException):
            job.future.set_exception(result)
        else:
            job.future.set_result(result)

    try:
        job.loop.call_soon_threadsafe(settle)
    except RuntimeError:  # the loop closed: nobody waits for this answer any more
        pass
