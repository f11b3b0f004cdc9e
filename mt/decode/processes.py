"""``DecodingProcesses``: several processes, each holding its own model, decoding one call's sentences at once.

On a CPU, a small model's decoding step spends much of its time outside the matrix products (Python, small
ops, OpenMP barriers), so a second thread in one process buys little; a second process, decoding other
sentences on its own core, nearly doubles the throughput of beam search. Threads of one process cannot do
that: their Python halves take turns at the interpreter lock. A model whose search runs in C++
(``mt.model.native``) has no such Python to hide: one process on every core is faster (docs/benchmarks.md).

Each worker is a *spawned* process (never forked: OpenMP and oneDNN do not survive a fork once used) that
builds its ``Translator`` once (``build``, a picklable callable, e.g. a ``functools.partial`` of a
module-level function) on ``threads`` torch threads, then decodes shares of sources until closed.
``decode`` sorts a call's sentences by length and deals them out in turn, so every worker gets the same mix
of lengths; each worker batches its share as one process would (``Translator.decode_sources``) and sends
its lines back as they finish. A sentence's output does not depend on the other sentences of its batch
(``mt.decode``'s batch independence), so a call gives the same translations as one process, up to float32
ties that a different batch shape moves (within 1e-5 of score). Sampling seeds each worker with
``seed + rank``.

A worker's ``UserError`` is raised again here with its message; any other failure closes every worker and
raises ``WorkerError`` with the worker's traceback, and a worker that dies (killed) ``WorkerLost``, a
``UserError`` (one line from a command). Workers ignore Ctrl-C: the parent stops them.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import queue
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from mt.config import DecodeConfig
from mt.errors import UserError

if TYPE_CHECKING:
    from mt.decode.translator import Translation, Translator

LinesDone = Callable[[list[tuple[int, "Translation"]]], None]  # (index in the call's sources, translation)
POLL_S = 0.5  # how often a waiting parent checks that its workers are alive
STOP_S = 10.0  # how long ``close`` waits for a worker to end before terminating it


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, else every core)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class WorkerError(RuntimeError):
    """A decoding process failed (a bug, not the user's input): its traceback."""


class WorkerLost(UserError):
    """A decoding process died without a word (killed, e.g. by the kernel when memory ran out)."""


@dataclasses.dataclass
class _Failure:
    """What a worker sends instead of a result: a user's error (message only) or a traceback."""

    user_error: bool
    text: str


def _worker_main(rank: int, build: Callable[[], Translator], threads: int, inbox, outbox) -> None:
    """A worker: build the translator, then decode ``(call, cfg, sources)`` jobs until ``None`` arrives."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group; the parent decides
    try:
        import torch

        torch.set_num_threads(threads)
        translator = build()
    except BaseException as e:  # noqa: BLE001 - every failure must reach the parent, not hang it
        outbox.put(("failed", rank, None, _failure(e)))
        return
    outbox.put(("ready", rank, None, None))
    while (job := inbox.get()) is not None:
        call, cfg, sources, scores, forced = job
        try:
            seeded = dataclasses.replace(cfg, seed=cfg.seed + rank)
            cpu = time.process_time()
            translator.with_config(seeded).decode_sources(
                sources, on_batch=lambda done, call=call: outbox.put(("lines", rank, call, done)), scores=scores,
                forced=forced,
            )
            outbox.put(("done", rank, call, time.process_time() - cpu))
        except BaseException as e:  # noqa: BLE001
            outbox.put(("failed", rank, call, _failure(e)))
            return


def _failure(error: BaseException) -> _Failure:
    if isinstance(error, UserError):
        return _Failure(True, str(error))
    return _Failure(False, "".join(traceback.format_exception(error)))


class DecodingProcesses:
    """``workers`` spawned processes of ``threads`` torch threads each, each holding ``build()``'s translator.

    Use as a context manager (or call ``close``); ``start`` waits until every worker has its model.
    ``cpu_seconds``: the workers' CPU time spent decoding (all calls).
    """

    def __init__(self, build: Callable[[], Translator], workers: int, threads: int = 1) -> None:
        if workers < 1 or threads < 1:
            raise ValueError(f"workers and threads must be >= 1, got {workers} and {threads}")
        context = multiprocessing.get_context("spawn")
        self._outbox = context.Queue()
        self._inboxes = [context.Queue() for _ in range(workers)]
        self._processes = [
            context.Process(target=_worker_main, args=(rank, build, threads, inbox, self._outbox),
                            name=f"mt-decode-{rank}", daemon=True)
            for rank, inbox in enumerate(self._inboxes)
        ]
        self.workers, self.threads = workers, threads
        self.cpu_seconds = 0.0
        self._calls = 0
        self._started = self._closed = False

    def __enter__(self) -> DecodingProcesses:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> DecodingProcesses:
        """Start the workers and wait until each has built its translator (their errors are raised here)."""
        if self._closed:
            raise ValueError("these decoding processes are closed")
        if self._started:
            return self
        self._started = True
        for process in self._processes:
            process.start()
        ready = 0
        while ready < self.workers:
            kind, _, _, payload = self._receive()
            if kind == "failed":
                self._fail(payload)
            ready += kind == "ready"
        return self

    def decode(self, cfg: DecodeConfig, sources: list[list[int]], on_lines: LinesDone, scores: bool = True,
               forced: Sequence[int | None] | None = None) -> None:
        """Decode ``sources`` (non-empty piece ids, as ``Translator.encode_lines`` gives them) under ``cfg``;
        ``on_lines`` gets ``(index into sources, Translation)`` pairs as workers finish them, each once;
        ``scores`` and ``forced`` (each source's forced first target token) as in ``Translator.decode_sources``."""
        self.start()
        self._calls += 1
        shares = self._shares(sources)
        for inbox, share in zip(self._inboxes, shares, strict=True):
            if share:
                first = [forced[i] for i in share] if forced is not None else None
                inbox.put((self._calls, cfg, [sources[i] for i in share], scores, first))
        pending = sum(1 for share in shares if share)
        try:
            while pending:
                kind, rank, call, payload = self._receive()
                if kind == "failed":
                    self._fail(payload)
                if kind == "lines":
                    on_lines([(shares[rank][k], translation) for k, translation in payload])
                elif kind == "done":
                    pending -= 1
                    self.cpu_seconds += payload
        except BaseException:  # Ctrl-C, or ``on_lines`` failed: the workers' half-done call is of no use
            self.close(wait=False)
            raise

    def _shares(self, sources: list[list[int]]) -> list[list[int]]:
        """Indices of ``sources`` per worker: sorted by length, dealt out in turn (equal mixes of lengths)."""
        by_length = sorted(range(len(sources)), key=lambda i: len(sources[i]))
        return [by_length[rank :: self.workers] for rank in range(self.workers)]

    def _receive(self) -> tuple[str, int, int | None, Any]:
        """The next message of any worker; ``WorkerLost`` if one died without a word."""
        while True:
            try:
                return self._outbox.get(timeout=POLL_S)
            except queue.Empty:
                dead = [(p.name, p.exitcode) for p in self._processes if p.exitcode is not None]
                if dead:
                    self.close(wait=False)
                    name, code = dead[0]
                    how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
                    raise WorkerLost(f"decoding process {name} {how} (out of memory? try fewer --workers)") from None

    def _fail(self, failure: _Failure) -> None:
        self.close(wait=False)
        if failure.user_error:
            raise UserError(failure.text)
        raise WorkerError(f"a decoding process failed:\n{failure.text}")

    def close(self, wait: bool = True) -> None:
        """Ask every worker to stop, wait up to ``STOP_S`` seconds (``wait``; else none), terminate the rest."""
        self._closed = True
        for process, inbox in zip(self._processes, self._inboxes, strict=True):
            if process.is_alive():
                inbox.put(None)
        deadline = time.monotonic() + (STOP_S if wait else 0.0)
        for process in self._processes:
            if process.pid is None:
                continue  # never started
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.terminate()
                process.join()
