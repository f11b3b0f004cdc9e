"""The batching worker alone (a recording fake engine, no HTTP): which queued jobs are decoded together."""

from __future__ import annotations

import asyncio
import threading

import pytest

from mt.serve.app import one_model
from mt.serve.batching import BatchFailed, BatchingWorker, Job, QueueFull
from mt.serve.engine import Options, Output

WAIT_S = 30


class Recorder:
    """Answers each line upper-cased (with ``:target`` when it has one); records every batch after the warm-up
    and its lines' targets; holds the first one at ``gate``."""

    def __init__(self, target_langs: tuple[str, ...] = ("de",)) -> None:
        self.source_lang, self.description = "en", "recorder"
        self.target_langs, self.tagged = list(target_langs), len(target_langs) > 1
        self.batches: list[tuple[list[str], Options]] = []
        self.targets: list[list[str | None]] = []
        self.warm_up_targets: list[str | None] = []
        self.gate, self.busy = threading.Event(), threading.Event()
        self.calls = 0

    def translate(self, lines, options, targets=None, on_done=None):
        self.calls += 1
        targets = list(targets) if targets is not None else [None] * len(lines)
        if self.calls == 1:
            self.warm_up_targets = targets
        else:
            self.batches.append((list(lines), options))
            self.targets.append(targets)
            self.busy.set()
            self.gate.wait(WAIT_S)
        if "boom" in lines:
            raise RuntimeError("boom")
        return [Output([line.upper() + (f":{t}" if t else "")], [0.0], 1, 1)
                for line, t in zip(lines, targets, strict=True)]


def job(loop, lines, cost, options=Options(), mergeable=True, target=None) -> Job:  # noqa: B008  (a frozen dataclass)
    """A job for the worker's one model (``submit`` names it)."""
    return Job(lines, options, cost, mergeable, loop, loop.create_future(), None, None, target)


def worker_of(engine: Recorder, **settings) -> BatchingWorker:
    """A worker serving ``engine`` alone."""
    return BatchingWorker(one_model(engine), **settings)


def submit(worker: BatchingWorker, j: Job) -> None:
    """Queue ``j`` for the worker's first model."""
    j.model = worker.models.models[0]
    j.engine = j.model.engine
    worker.submit(j)


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def run_held(loop, engine: Recorder, jobs: list[Job], budget: int) -> list:
    """Hold the worker on a first job, queue ``jobs``, release it; the results of ``jobs`` (or their errors)."""
    worker = worker_of(engine, max_batch_tokens=budget, max_wait_s=0.001, max_queue=len(jobs), threads=1)
    worker.start()
    assert worker.ready.wait(WAIT_S)
    holder = job(loop, ["hold"], 1)
    submit(worker, holder)
    assert engine.busy.wait(WAIT_S)
    for j in jobs:
        submit(worker, j)
    engine.gate.set()
    results = loop.run_until_complete(asyncio.wait_for(
        asyncio.gather(holder.future, *(j.future for j in jobs if not j.future.done()), return_exceptions=True),
        WAIT_S))
    worker.stop()
    return results[1:]


def test_jobs_are_gathered_in_order_under_the_budget_and_by_options(loop):
    engine = Recorder()
    greedy = Options(strategy="greedy")
    jobs = [job(loop, ["a"], 4), job(loop, ["b", "c"], 4, greedy), job(loop, ["d"], 4), job(loop, ["e"], 4),
            job(loop, ["f"], 1)]
    results = run_held(loop, engine, jobs, budget=8)
    assert [[o.text for o in r] for r in results] == [["A"], ["B", "C"], ["D"], ["E"], ["F"]]
    batches = [lines for lines, _ in engine.batches[1:]]
    # a+d fill the budget; e does not fit, and f may not overtake it; greedy b,c goes alone
    assert batches == [["a", "d"], ["b", "c"], ["e", "f"]]


def test_jobs_for_different_targets_share_a_batch_each_line_with_its_own(loop):
    engine = Recorder(("de", "fr"))
    jobs = [job(loop, ["a", "b"], 2, target="fr"), job(loop, ["c"], 1, target="de"), job(loop, ["d"], 1, target="fr")]
    results = run_held(loop, engine, jobs, budget=100)
    assert [[o.text for o in r] for r in results] == [["A:fr", "B:fr"], ["C:de"], ["D:fr"]]
    assert engine.batches[1][0] == ["a", "b", "c", "d"]  # one batch, not one per target
    assert engine.targets[1] == ["fr", "fr", "de", "fr"]
    assert engine.warm_up_targets == ["de"]  # a tagged engine warms up with a target: its first


def test_sampling_jobs_are_never_merged(loop):
    engine = Recorder()
    sample = Options(strategy="sample")
    jobs = [job(loop, ["a"], 1, sample, mergeable=False), job(loop, ["b"], 1, sample, mergeable=False)]
    run_held(loop, engine, jobs, budget=100)
    assert [lines for lines, _ in engine.batches[1:]] == [["a"], ["b"]]


def test_a_cancelled_job_is_dropped_and_a_failing_batch_fails_only_its_jobs(loop):
    engine = Recorder()
    gone, fails, other = job(loop, ["x"], 1), job(loop, ["boom"], 1), job(loop, ["y"], 1, Options(beam=2))
    gone.future.cancel()
    results = run_held(loop, engine, [gone, fails, other], budget=100)
    assert isinstance(results[0], BatchFailed) and str(results[0]) == "RuntimeError: boom"
    assert [o.text for o in results[1]] == ["Y"]
    assert [lines for lines, _ in engine.batches[1:]] == [["boom"], ["y"]]


def test_a_full_queue_refuses(loop):
    engine = Recorder()
    worker = worker_of(engine, max_batch_tokens=10, max_wait_s=0.001, max_queue=1, threads=1)
    worker.start()
    assert worker.ready.wait(WAIT_S)
    submit(worker, job(loop, ["hold"], 1))
    assert engine.busy.wait(WAIT_S)
    submit(worker, job(loop, ["queued"], 1))
    with pytest.raises(QueueFull):
        submit(worker, job(loop, ["refused"], 1))
    engine.gate.set()
    worker.stop()  # decodes the queued job before it returns
    assert [lines for lines, _ in engine.batches] == [["hold"], ["queued"]]


class OneLineAtATime:
    """Reports each line as done on its own, and holds the rest of the call after the first line."""

    source_lang, target_langs, tagged, description = "en", ["de"], False, "one line at a time"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def translate(self, lines, options, targets=None, on_done=None):
        self.calls += 1
        outputs = [Output([line.upper()], [0.0], 1, 1) for line in lines]
        for i, output in enumerate(outputs):
            if on_done is not None:
                on_done([(i, output)])
            if self.calls > 1 and i == 0:
                assert self.release.wait(WAIT_S)
        return outputs


def test_a_job_is_answered_as_soon_as_its_lines_are_done(loop):
    engine = OneLineAtATime()
    worker = worker_of(engine, max_batch_tokens=100, max_wait_s=0.2, max_queue=4, threads=1)
    worker.start()
    assert worker.ready.wait(WAIT_S)
    first, second = job(loop, ["a"], 1), job(loop, ["b", "c"], 2)
    submit(worker, first)
    submit(worker, second)  # gathered with the first (the worker waits up to 0.2 s for more)
    assert [o.text for o in loop.run_until_complete(asyncio.wait_for(first.future, WAIT_S))] == ["A"]
    assert not second.future.done()  # the engine still holds the gather's other lines
    engine.release.set()
    assert [o.text for o in loop.run_until_complete(asyncio.wait_for(second.future, WAIT_S))] == ["B", "C"]
    worker.stop()
    assert engine.calls == 2  # the warm-up, then one gather of both jobs


class Filling(Recorder):
    """A Recorder with mt's second warm-up (``fill``), which records its budget and target."""

    def __init__(self) -> None:
        super().__init__(("de", "fr"))
        self.fills: list[tuple[int, str | None]] = []

    def fill(self, max_batch_tokens: int, target: str | None = None) -> int:
        self.fills.append((max_batch_tokens, target))
        return 1


@pytest.mark.parametrize("fill", [True, False])
def test_the_worker_fills_after_the_warm_up_line_unless_told_not_to(fill):
    engine = Filling()
    worker = worker_of(engine, max_batch_tokens=321, max_wait_s=0.001, max_queue=1, threads=1, fill=fill)
    worker.start()
    assert worker.ready.wait(WAIT_S)
    worker.stop()
    assert engine.calls == 1 and engine.fills == ([(321, "de")] if fill else [])
