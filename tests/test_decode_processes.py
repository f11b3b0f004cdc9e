"""Decoding in several processes (``mt.decode.processes``, ``mt-translate --workers``) against one process:
the same translations on the trained demo model, and failures that end the call instead of hanging it."""

from __future__ import annotations

import dataclasses
import functools
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from export_helpers import demo_model

from mt.checkpoint import load_checkpoint
from mt.cli.translate import worker_translator
from mt.config import DecodeConfig, to_config
from mt.decode import Translation, Translator
from mt.decode.processes import DecodingProcesses, WorkerError, WorkerLost
from mt.errors import UserError

REPO = Path(__file__).resolve().parents[1]
TIE = 1e-5  # a different batch shape may move a float32 score tie by this much, and with it the chosen output


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return demo_model(tmp_path_factory.getbasetemp() / "export_demo")  # trained once, shared with the export tests


def settings(ckpt: Path, strategy: str) -> DecodeConfig:
    cfg = to_config(load_checkpoint(ckpt)["config"])
    return dataclasses.replace(cfg.decode, strategy=strategy, beam_size=4 if strategy == "beam" else 1, nbest=1)


def outputs(translator: Translator, lines: list[str], on_batch=None) -> list[tuple[str, list[int], float]]:
    return [(t.text, t.hypotheses[0].tokens if t.hypotheses else [], t.hypotheses[0].score if t.hypotheses else 0.0)
            for t in translator.translate_nbest(lines, on_batch=on_batch)]


def test_two_processes_translate_the_demo_test_set_like_one(demo) -> None:
    """Beam, then greedy on the same processes (the search settings travel with each call), and ``on_batch``."""
    lines = demo.sources[:200] + ["", "   "]
    build = functools.partial(worker_translator, [str(demo.ckpt)], "fp32", settings(demo.ckpt, "beam"))
    plain = build()  # the model each process builds, here on 1 thread
    with DecodingProcesses(build, workers=2, threads=1) as processes:
        pooled = Translator(None, plain.tokenizers, plain.cfg, max_positions=plain.max_positions, processes=processes)
        for strategy in ("beam", "greedy"):
            decode = settings(demo.ckpt, strategy)
            one, several = plain.with_config(decode), pooled.with_config(decode)
            heard: list[int] = []
            got = outputs(several, lines, on_batch=lambda done, heard=heard: heard.extend(i for i, _ in done))
            want = outputs(one, lines)
            assert sorted(heard) == list(range(len(lines)))  # every line once
            assert got[-2:] == [("", [], 0.0), ("", [], 0.0)]  # empty lines never reach a process
            moved = [(g, w) for g, w in zip(got, want, strict=True) if g != w]  # other batch shapes: float32 rounding
            assert all(abs(g[2] - w[2]) <= TIE for g, w in moved), moved
            assert sum(g[0] != w[0] for g, w in moved) <= len(lines) // 100  # only a tie can change a text
        assert processes.cpu_seconds > 0


def test_each_process_decodes_its_share_exactly_as_one_process_would(demo) -> None:
    """Dealt out by length, each share batches in its process as it does alone: bit for bit the same."""
    decode = settings(demo.ckpt, "beam")
    lines = demo.sources[:120]
    one = worker_translator([str(demo.ckpt)], "fp32", decode)
    build = functools.partial(worker_translator, [str(demo.ckpt)], "fp32", decode)
    with DecodingProcesses(build, workers=3, threads=1) as processes:
        several = Translator(None, one.tokenizers, decode, max_positions=one.max_positions, processes=processes)
        got = outputs(several, lines)
        shares = processes._shares(one.encode_lines(lines))
    for share in shares:
        alone = outputs(one, [lines[i] for i in share])
        assert [got[i] for i in share] == alone


def test_shares_partition_the_sentences_with_equal_mixes_of_lengths() -> None:
    processes = DecodingProcesses(lambda: None, workers=3)  # never started
    sources = [[5] * n for n in (9, 1, 4, 7, 2, 8, 3, 6, 5, 10)]
    shares = processes._shares(sources)
    assert sorted(i for share in shares for i in share) == list(range(len(sources)))
    assert [len(share) for share in shares] == [4, 3, 3]
    totals = [sum(len(sources[i]) for i in share) for share in shares]
    assert max(totals) - min(totals) <= max(map(len, sources))  # dealt in turn by length: 1, 4, 7, 10 / 2, 5, 8 / ...


# ---- failures: raised here, never a hang --------------------------------------------------------------------


def refusing_build():
    raise UserError("--precision bf16 needs a CPU with bf16 instructions")


def crashing_build():
    raise KeyError("model.decoder.weight")


class DyingTranslator:
    """Builds, then its process is killed by the first sentence it is asked to decode."""

    def with_config(self, cfg):
        return self

    def decode_sources(self, sources, on_batch=None, scores=True, forced=None):
        os.kill(os.getpid(), signal.SIGKILL)


class EchoTranslator:
    """Translates a source into its piece ids as text, one line per ``on_batch`` call (no model, no torch)."""

    def with_config(self, cfg):
        return self

    def decode_sources(self, sources, on_batch=None, scores=True, forced=None):
        for k, ids in enumerate(sources):
            on_batch([(k, Translation([], [" ".join(map(str, ids))], len(ids)))])


def test_lines_come_back_to_their_places_in_the_call() -> None:
    sources = [[7, 7, 7], [1], [4, 4], [9] * 9, [2, 2]]
    heard: dict[int, str] = {}
    with DecodingProcesses(EchoTranslator, workers=2) as processes:
        processes.decode(DecodeConfig(), sources, lambda done: heard.update((i, t.text) for i, t in done))
    assert heard == {i: " ".join(map(str, ids)) for i, ids in enumerate(sources)}


def test_a_failing_caller_stops_the_processes_at_once() -> None:
    """Ctrl-C (or any error) while lines come back: the workers' half-done call is dropped, nothing lingers."""

    def interrupt(done):
        raise KeyboardInterrupt

    processes = DecodingProcesses(EchoTranslator, workers=2).start()
    with pytest.raises(KeyboardInterrupt):
        processes.decode(DecodeConfig(), [[5, 6], [7]], interrupt)
    assert not any(p.is_alive() for p in processes._processes)


def test_a_users_error_while_building_is_raised_with_its_message() -> None:
    with pytest.raises(UserError, match="bf16 instructions"):
        DecodingProcesses(refusing_build, workers=2).start()


def test_a_crash_while_building_is_a_worker_error_with_its_traceback() -> None:
    with pytest.raises(WorkerError, match="KeyError: 'model.decoder.weight'"):
        DecodingProcesses(crashing_build, workers=1).start()


def test_a_killed_process_ends_the_call_with_worker_lost() -> None:
    with DecodingProcesses(DyingTranslator, workers=2) as processes, pytest.raises(WorkerLost, match="signal 9"):
        processes.decode(DecodeConfig(), [[5, 6], [7]], lambda done: None)
    with pytest.raises(ValueError, match="closed"):
        processes.decode(DecodeConfig(), [[5]], lambda done: None)


# ---- the command ---------------------------------------------------------------------------------------------


def test_mt_translate_with_two_workers_writes_what_one_process_writes(demo, tmp_path: Path) -> None:
    source = tmp_path / "test.src"
    source.write_text("\n".join(demo.sources[:200] + ["", demo.sources[0]]) + "\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    written = {}
    for workers in (1, 2):
        out = tmp_path / f"out{workers}.txt"
        cmd = [sys.executable, "-m", "mt.cli.translate", "--ckpt", str(demo.ckpt), "--input", str(source),
               "--output", str(out), "--threads", "1", "--workers", str(workers)]
        result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
        written[workers] = out.read_text(encoding="utf-8").splitlines()
    assert len(written[2]) == 202 and written[2][200] == ""
    same = sum(a == b for a, b in zip(written[1], written[2], strict=True))
    assert same >= 200  # ties aside (within 1e-5, the test above), the same lines


def test_more_threads_than_cores_is_warned_of() -> None:
    from mt.cli.translate import oversubscribed

    assert oversubscribed(2, 1, 2) is None and oversubscribed(1, 2, 2) is None
    assert oversubscribed(2, 2, 2) == ("--workers 2 x --threads 2 = 4 torch threads on 2 cores decode several "
                                       "times slower; leave --threads out (it is then 1)")
