"""scripts/bench_align.py end to end on the demo model: both ways of aligning are timed and compared."""

from __future__ import annotations

import re

from export_helpers import demo_model
from helpers import load_script


def test_bench_align_prints_each_pair_and_the_medians(tmp_path_factory, tmp_path, capsys):
    demo = demo_model(tmp_path_factory.getbasetemp() / "export_demo")
    source = tmp_path / "source.txt"
    source.write_text("\n".join(demo.sources[:40]) + "\n", encoding="utf-8")
    capsys.readouterr()  # the demo's training, where this test trained it
    load_script("bench_align").main(["--ckpt", str(demo.ckpt), "--source-file", str(source), "--pairs", "2"])
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == ["pair 1", "pair 2", "medians"]
    assert re.fullmatch(r"pair 1: decoding \S+ s, aligning: kept \S+ s \(\S+%\), encoded \S+ s \(\S+%\)", out[0])
    assert "encoded" in out[1].split("aligning: ")[1].split(",")[0]  # the second pair starts with the other way
    assert re.fullmatch(r"medians: aligning with the kept encoder outputs \S+% of the decoding time, "
                        r"encoding again \S+%", out[2])
