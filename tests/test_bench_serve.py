"""scripts/bench_serve.py --smoke: the load test runs end to end, answers are exact, errors 0, figures written.

``--soak-only``: the soak alone (a few seconds here), its RSS samples and exact answers in the report.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from export_helpers import demo_model
from helpers import SCRIPTS


def bench_command(tmp_path_factory, tmp_path, *flags: str) -> list[str]:
    """bench_serve.py ``--smoke`` with ``flags`` on the demo model, 40 of its lines, figures to tmp_path/bench.json."""
    demo = demo_model(tmp_path_factory.getbasetemp() / "export_demo")
    source = tmp_path / "source.txt"
    source.write_text("\n".join(demo.sources[:40]) + "\n", encoding="utf-8")
    return [sys.executable, str(SCRIPTS / "bench_serve.py"), "--smoke", *flags, "--ckpt", str(demo.ckpt),
            "--source-file", str(source), "--threads", "1", "--json-out", str(tmp_path / "bench.json")]


@pytest.mark.slow
def test_bench_serve_smoke(tmp_path_factory, tmp_path):
    done = subprocess.run(bench_command(tmp_path_factory, tmp_path), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "bench.json").read_text())
    assert report["errors"] == 0 and report["exact"] is True
    assert {(r["server"], r["clients"]) for r in report["runs"]} == {("dynamic", 1), ("dynamic", 4),
                                                                     ("one-at-a-time", 4)}
    assert all(r["requests"] == 12 and r["sentences_per_s"] > 0 for r in report["runs"])
    assert "medians over 1 round(s) at 4 clients" in done.stdout
    documents = report["documents"]  # HTML documents against the same sentences as lines, on one server
    assert documents["errors"] == 0 and documents["documents_fraction_of_lines"] > 0
    assert [r["server"] for r in documents["runs"]] == ["plain lines", "html documents"]
    assert documents["runs"][0]["sentences"] == documents["runs"][1]["sentences"] > 3 * 5


@pytest.mark.slow
def test_bench_serve_soak_only(tmp_path_factory, tmp_path):
    command = bench_command(tmp_path_factory, tmp_path, "--soak-only", "--soak-minutes", "0.05")
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "bench.json").read_text())
    assert set(report) == {"soak"}  # no comparison runs
    soak = report["soak"]
    assert soak["errors"] == 0 and soak["exact"] is True and soak["requests"] > 0
    assert soak["rss_start_mib"] > 0 and soak["rss_end_mib"] > 0 and "soak: RSS" in done.stdout
    refused = subprocess.run(command[:4] + command[6:], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "--soak-only needs --soak-minutes" in refused.stderr


@pytest.mark.slow
def test_bench_serve_models_smoke(tmp_path_factory, tmp_path):
    """Two models (the demo model twice) alone and mixed, each answer exact; the memory of one model."""
    command = bench_command(tmp_path_factory, tmp_path)
    command[1] = str(SCRIPTS / "bench_serve_models.py")
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "bench.json").read_text())
    runs = report["mixed"]["runs"]
    assert {(r["load"], r["model"]) for r in runs} == {(load, model) for load in ("alone", "mixed")
                                                       for model in ("en-de", "en-de-2")}
    assert all(r["errors"] == 0 and r["exact"] and r["requests"] > 0 for r in runs)
    assert [m["models"] for m in report["memory"]] == [1]
    assert all(len(m["loads_mib"]) == m["models"] and m["rss_mib"] > 0 for m in report["memory"])
