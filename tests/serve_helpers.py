"""What the mt-serve tests share: an engine over a checkpoint, a server on a free loopback port, slow engines."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
import uvicorn

from mt.checkpoint import load_for_inference
from mt.data.languages import is_multilingual, target_languages
from mt.decode import Translator
from mt.serve.app import create_app
from mt.serve.engine import Options, Output, TorchEngine
from mt.serve.settings import ServeSettings

START_TIMEOUT_S = 60


def torch_engine(ckpt: Path, **decode) -> TorchEngine:
    """The checkpoint's model as a serving engine, with ``decode`` overriding its decode settings."""
    import dataclasses

    model, tokenizers, cfg = load_for_inference(ckpt, "cpu")
    settings = dataclasses.replace(cfg.decode, **decode)
    translator = Translator(model, tokenizers, settings, "cpu", max_positions=cfg.model.max_positions)
    targets = target_languages(cfg.data)
    return TorchEngine(translator, cfg.data.src_lang, targets, str(ckpt), tagged=is_multilingual(cfg.data))


def reference(
    engine: TorchEngine, lines: Sequence[str], options: Options | None = None, target: str | None = None
) -> list[str]:
    """mt-translate's answer (``--target-lang target``): a fresh Translator with the same settings over all
    ``lines`` at once."""
    t = engine.translator
    settings = engine.settings(options or Options())
    translator = Translator(t.model, t.tokenizers, settings, "cpu", max_positions=t.max_positions)
    return translator.translate(lines, target_lang=target)


@contextmanager
def serving(engine, settings: ServeSettings | None = None) -> Iterator[tuple[str, object]]:
    """(base URL, app) of a server on 127.0.0.1 with a port the OS picked, ready (/health 200), stopped at exit."""
    app = create_app(engine, settings or ServeSettings(threads=1))
    with running(app) as url:
        wait_healthy(url)
        yield url, app


@contextmanager
def serving_unready(engine) -> Iterator[str]:
    """The base URL of a server whose warm-up may not have run yet (it answers /health)."""
    with running(create_app(engine, ServeSettings(threads=1))) as url:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not server_answers(url):
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        yield url


def server_answers(url: str) -> bool:
    try:
        httpx.get(f"{url}/health", timeout=5)
    except httpx.TransportError:
        return False
    return True


@contextmanager
def running(app) -> Iterator[str]:
    """uvicorn serving ``app`` in a thread on a loopback socket the OS picked; stopped (gracefully) at exit."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=START_TIMEOUT_S)
        sock.close()


def wait_healthy(url: str, timeout: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{url}/health did not answer 200 within {timeout} s")


class GatedEngine:
    """``inner`` whose ``translate`` waits for ``gate`` (after the warm-up), to hold the worker busy on purpose."""

    def __init__(self, inner: TorchEngine, fail_on: str | None = None) -> None:
        self.inner = inner
        self.gate = threading.Event()
        self.busy = threading.Event()  # set while a batch waits at the gate
        self.fail_on = fail_on
        self.warmed = False
        self.batches: list[int] = []  # lines per translate call after the warm-up
        self.source_lang, self.target_langs, self.description = inner.source_lang, inner.target_langs, "gated"
        self.tagged = inner.tagged

    @property
    def max_src_len(self) -> int | None:
        return self.inner.max_src_len

    @property
    def on_too_long(self) -> str:
        return self.inner.on_too_long

    def settings(self, options: Options):
        return self.inner.settings(options)

    def count_pieces(self, line: str, target: str | None = None) -> int:
        return self.inner.count_pieces(line, target)

    def translate(self, lines: Sequence[str], options: Options, targets=None, on_done=None, align=None) -> list[Output]:
        if self.warmed:
            self.batches.append(len(lines))
            self.busy.set()
            self.gate.wait(timeout=START_TIMEOUT_S)
            self.busy.clear()
        self.warmed = True
        if self.fail_on is not None and self.fail_on in lines:
            raise RuntimeError(f"decoding failed on {self.fail_on!r}")
        return self.inner.translate(lines, options, targets, align=align)
