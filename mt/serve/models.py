"""The served models: each one's spec (name, languages, how to load it), its engine once loaded, its memory.

A ``ModelSet`` is the list the server was started with (or re-read on SIGHUP): the routing over its
languages (``routing.Router``) and, per model, a ``ServedModel`` that holds the engine while it is loaded.
Loading runs on the decoding worker's thread (``BatchingWorker.load``), never on the event loop; with
``max_loaded`` a load unloads the least recently used other models beyond it. An unloaded model's
engine is only dropped from here: jobs already queued hold it and finish on it, and its memory goes
back when the last of them is answered.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mt.serve.engine import Engine
from mt.serve.routing import Languages, Router

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_bytes() -> int:
    """This process's resident memory (Linux ``/proc/self/statm``; 0 where there is none)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * PAGE
    except OSError:
        return 0


@dataclass(frozen=True)
class ModelSpec:
    """What the server knows of a model before loading it. ``identity`` (paths and options): a reload
    keeps the loaded engine of a spec whose name and identity did not change."""

    languages: Languages
    load: Callable[[], Engine]
    identity: tuple = ()
    kind: str = "mt"  # mt | ct2
    what: str = ""  # checkpoint paths or directory, for /v1/models

    @property
    def name(self) -> str:
        return self.languages.name


@dataclass(eq=False)
class ServedModel:
    """One model of the list and its engine while loaded; ``resident_bytes``: what its load added to the
    process's resident memory."""

    spec: ModelSpec
    engine: Engine | None = None
    resident_bytes: int = 0
    loads: int = 0
    last_used: float = field(default_factory=time.monotonic)

    @property
    def name(self) -> str:
        return self.spec.name

    def load(self) -> Engine:
        """Load the engine (the caller's thread: the decoding worker's, or the main thread at start)."""
        before = resident_bytes()
        engine = self.spec.load()
        self.resident_bytes = max(0, resident_bytes() - before)
        self.engine, self.loads = engine, self.loads + 1
        self.last_used = time.monotonic()
        return engine

    def unload(self) -> None:
        self.engine, self.resident_bytes = None, 0


class ModelSet:
    """The served models in the list's order, their routing, and the bound on how many stay loaded."""

    def __init__(self, models: Sequence[ServedModel], max_loaded: int | None = None) -> None:
        names = [m.name for m in models]
        if not models:
            raise ValueError("no model to serve")
        if len(set(names)) != len(names):
            raise ValueError(f"two models named {next(n for n in names if names.count(n) > 1)}")
        self.models = list(models)
        self.by_name = {m.name: m for m in models}
        self.max_loaded = max_loaded
        self.router = Router([m.spec.languages for m in models])

    def __getitem__(self, name: str) -> ServedModel:
        return self.by_name[name]

    def loaded_at_start(self) -> list[ServedModel]:
        """The models to load before serving (without ``--lazy``): the first ``max_loaded``, or all."""
        return self.models[: self.max_loaded or len(self.models)]

    def loaded(self) -> list[ServedModel]:
        return [m for m in self.models if m.engine is not None]

    def touch(self, model: ServedModel) -> None:
        model.last_used = time.monotonic()

    def unload_beyond_limit(self, keep: ServedModel) -> list[ServedModel]:
        """Unload the least recently used models (never ``keep``) while more than ``max_loaded`` are loaded."""
        if self.max_loaded is None:
            return []
        dropped = []
        others = sorted((m for m in self.loaded() if m is not keep), key=lambda m: m.last_used)
        while len(self.loaded()) > self.max_loaded and others:
            victim = others.pop(0)
            victim.unload()
            dropped.append(victim)
        return dropped

    def successor(self, specs: Sequence[ModelSpec], max_loaded: int | None) -> ModelSet:
        """The set for a re-read list: a model whose name and identity are unchanged keeps its engine."""
        kept = {(m.name, m.spec.identity): m for m in self.models}
        return ModelSet([kept.get((s.name, s.identity)) or ServedModel(s) for s in specs], max_loaded)
