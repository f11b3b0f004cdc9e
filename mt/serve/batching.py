"""Dynamic batching: one worker thread owns the engine and decodes the lines of concurrent requests together.

The asyncio front ``submit``s a ``Job`` (a request's lines, its options, its target language, its token
cost, a future) into a bounded queue and awaits the future; it never decodes. The worker takes the oldest
job, then gathers later jobs with the same options (the batching key) in arrival order while their cost
fits ``max_batch_tokens``, waiting at most ``max_wait_ms`` for more to arrive, and decodes all their lines
in one ``engine.translate`` call, each line with its own job's target (a model of several target languages
reads the target as a tag in the source ids, so jobs for different targets share a batch). A gather may
hold several of the decoder's batches (Marian's maxi-batch; by default ``GATHER_BATCHES``): the engine sorts
its lines by length and decodes them in batches of similar lengths, which wastes fewer steps than lines in
arrival order, and fewer of its batches run part-full than when each gather is one batch; each job
is answered as soon as its own lines are done (``on_done``), with its outputs in order, through
``loop.call_soon_threadsafe``. mt's decoder gives a sentence the same output whatever else is in its
batch, so an answer does not depend on its neighbours. Sampling jobs are never merged (the sampling
generator's draws depend on the batch). A failing batch fails its unanswered jobs only; jobs whose
client left or timed out before their batch began are dropped.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mt.serve.engine import Engine, Options, Output

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
    target: str | None = None  # the tag language of a model of several targets (None: no tag)
    align: Sequence[bool] | None = None  # per line: give its best translation's word links too
    queued_at: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class BatchReport:
    """What one decoded batch was, for the metrics."""

    jobs: int
    lines: list[Output]
    seconds: float
    failed: bool


class BatchingWorker:
    """The decoding thread and its queue; ``start`` warms the engine up, ``stop`` drains and joins."""

    def __init__(
        self,
        engine: Engine,
        *,
        max_batch_tokens: int,
        max_wait_s: float,
        max_queue: int,
        threads: int,
        fill: bool = True,
        on_batch: Callable[[BatchReport], None] = lambda report: None,
    ) -> None:
        self.engine = engine
        self.max_batch_tokens, self.max_wait_s, self.max_queue = max_batch_tokens, max_wait_s, max_queue
        self.threads, self.fill = threads, fill
        self.on_batch = on_batch
        self.ready = threading.Event()  # set once the warm-up translation ran
        self.warmup_error: BaseException | None = None
        self._queue: deque[Job] = deque()
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
        return len(self._queue)

    def submit(self, job: Job) -> None:
        """Queue ``job``; QueueFull when ``max_queue`` jobs wait already."""
        with self._cond:
            if len(self._queue) >= self.max_queue:
                raise QueueFull(max(1, math.ceil(self._last_batch_s)))  # room comes back as a batch ends
            self._queue.append(job)
            self._cond.notify_all()

    def _run(self) -> None:
        import torch

        torch.set_num_threads(self.threads)
        try:
            self._warm_up()
        except Exception as e:  # noqa: BLE001  (reported by /health; the server stays up to say why)
            self.warmup_error = e
        else:
            self.ready.set()
        while (batch := self._gather()) is not None:
            self._decode(batch)

    def _warm_up(self) -> None:
        """One line, then (an engine with ``fill``: mt's) the largest batch, at the length limit."""
        target = warm_up_target(self.engine)
        self.engine.translate([WARM_UP_LINE], Options(), [target])
        fill = getattr(self.engine, "fill", None)
        if fill is not None and self.fill:
            start = time.monotonic()
            lines = fill(self.max_batch_tokens, target)
            logger.info("warm-up: %d lines at the length limit in %.1f s", lines, time.monotonic() - start)

    def _gather(self) -> list[Job] | None:
        """The next batch (see the module docstring), or None once stopping with an empty queue."""
        with self._cond:
            while not self._queue and not self._stopping:
                self._cond.wait()
            if not self._queue:
                return None
            first = self._queue.popleft()
            batch, tokens = [first], first.cost
            deadline = time.monotonic() + self.max_wait_s
            while first.mergeable:
                tokens, full = self._take_matching(first.options, batch, tokens)
                remaining = deadline - time.monotonic()
                if full or remaining <= 0 or self._stopping:
                    break
                self._cond.wait(remaining)
        return [job for job in batch if not job.future.done()]  # left or timed out meanwhile

    def _take_matching(self, options: Options, batch: list[Job], tokens: int) -> tuple[int, bool]:
        """Move queued jobs with ``options`` into ``batch`` in arrival order while they fit.

        Returns the new token total and whether the batch is full (a matching job did not fit, or the
        budget is reached). Jobs whose request is gone are dropped from the queue on the way.
        """
        kept: deque[Job] = deque()
        full = tokens >= self.max_batch_tokens
        for job in self._queue:
            if job.future.done():
                continue
            if not full and job.mergeable and job.options == options:
                if tokens + job.cost <= self.max_batch_tokens:
                    batch.append(job)
                    tokens += job.cost
                    continue
                full = True  # keep arrival order: no later, smaller job overtakes this one
            kept.append(job)
        self._queue = kept
        return tokens, full or tokens >= self.max_batch_tokens

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
            outputs = self.engine.translate(lines, batch[0].options, targets, on_done=answers.lines_done, **aligned)
            answers.finish(outputs)
        except Exception as e:  # noqa: BLE001  (one bad batch fails its requests, not the server)
            answers.fail(BatchFailed(f"{type(e).__name__}: {e}"))
            outputs, failed = [], True
        else:
            failed = False
        self._last_batch_s = time.monotonic() - start
        self.on_batch(BatchReport(len(batch), outputs, self._last_batch_s, failed))


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
