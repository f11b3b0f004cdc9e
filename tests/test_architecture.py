"""The package layering of docs/ARCHITECTURE.md, checked: who may import whom, and inference without training.

Every ``import mt.x`` / ``from mt.x import`` in ``mt/`` (at the top of a module or inside a function) is
read with ``ast`` and must be allowed by ``MAY_IMPORT``; importing the inference entry points in a fresh
interpreter must not load any ``mt.train`` module.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

MT = Path(__file__).resolve().parents[1] / "mt"

# unit (a package, or a top-level module) -> the units it may import (itself always allowed)
MAY_IMPORT: dict[str, set[str]] = {
    "errors": set(),
    "config": {"errors"},  # mt/config.py and mt/config_rules.py
    "device": {"errors"},
    "allocator": set(),
    "kernel_cache": set(),
    "runs": {"errors"},
    "data": {"errors", "config"},
    "model": {"config", "kernel_cache"},
    "decode": {"errors", "config", "data", "model"},
    "checkpoint": {"errors", "config", "data", "model"},
    "eval": {"errors", "config", "data", "decode"},
    "export": {"errors", "config", "data", "model", "decode", "checkpoint"},
    "pretrained": {"errors", "config", "data", "model", "checkpoint"},
    "document": {"errors"},
    "serve": {"errors", "config", "data", "model", "decode", "checkpoint", "document"},
    "train": {
        "errors", "config", "device", "allocator", "kernel_cache", "runs", "data", "model", "decode", "checkpoint",
        "eval",
    },
    "cli": {
        "errors", "config", "device", "allocator", "kernel_cache", "runs", "data", "model", "decode", "checkpoint",
        "eval", "export", "serve", "train", "document", "pretrained",
    },
}


SAME_UNIT = {"config_rules": "config"}  # the rule table is part of the config unit
PACKAGE_ROOT = {"__version__"}  # ``from mt import __version__``: the package root, importable by every unit


def unit_of(path: Path) -> str:
    rel = path.relative_to(MT)
    name = rel.parts[0] if len(rel.parts) > 1 else rel.stem
    return SAME_UNIT.get(name, name)


def mt_imports(path: Path) -> set[str]:
    """The ``mt`` units a module imports, wherever the import statement is."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + ([f"mt.{a.name}" for a in node.names] if node.module == "mt" else [])
        found |= {SAME_UNIT.get(n, n) for n in (name.split(".")[1] for name in names if name.startswith("mt."))}
    return found - PACKAGE_ROOT


MODULES = sorted(p for p in MT.rglob("*.py") if p.name != "__init__.py" or p.parent != MT)


def test_every_unit_has_a_rule():
    assert {unit_of(p) for p in MODULES} <= set(MAY_IMPORT)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(MT)))
def test_imports_follow_the_layering(path: Path):
    unit = unit_of(path)
    allowed = MAY_IMPORT[unit] | {unit} | ({"cli"} if path.name == "__main__.py" else set())  # python -m mt.train
    forbidden = mt_imports(path) - allowed
    assert not forbidden, f"mt/{path.relative_to(MT)} ({unit}) imports {sorted(forbidden)}: see docs/ARCHITECTURE.md"


def test_inference_entry_points_load_no_training_code():
    code = (
        "import sys\n"
        "import mt.decode, mt.eval, mt.eval.report, mt.eval.scoring, mt.checkpoint, mt.export\n"
        "import mt.cli.translate, mt.cli.evaluate, mt.cli.export, mt.cli.plots, mt.cli.serve, mt.serve\n"
        "import mt.pretrained, mt.cli.import_model\n"
        "import mt.serve.app, mt.serve.ct2_engine\n"
        "from mt.cli.translate import load_translator\n"
        "print(sorted(m for m in sys.modules if m == 'mt.train' or m.startswith('mt.train.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
