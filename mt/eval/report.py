"""Evaluation reports: translate a test set, score it, time it, plot alignments, write JSON + Markdown.

``evaluate(...)`` does it all for a model and its tokenizers and returns the report dict; the files
it writes under ``out_dir`` are ``NAME.json`` (every field), ``NAME.md`` (the same for people),
``NAME.hyp.txt`` (one hypothesis per line) and ``NAME.align-<line>.png`` per aligned sentence.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mt import __version__
from mt.config import DecodeConfig
from mt.data.tokenizer import BOS_ID, EOS_ID
from mt.decode import Translation, Translator
from mt.eval.metrics import score
from mt.eval.plots import plot_alignment


@dataclass
class Speed:
    """Decoding throughput; ``wall_s`` times translation only (no model loading, no scoring)."""

    sentences: int
    src_tokens: int  # source pieces, EOS excluded
    tgt_tokens: int  # generated tokens of the best hypotheses, EOS included
    wall_s: float
    threads: int
    device: str

    def as_dict(self) -> dict[str, Any]:
        rate = lambda n: n / self.wall_s if self.wall_s > 0 else float("nan")
        return {
            **dataclasses.asdict(self),
            "sentences_per_s": rate(self.sentences),
            "tgt_tokens_per_s": rate(self.tgt_tokens),
        }


def timed_translate(
    translator: Translator, sources: Sequence[str], progress: bool = False, target_lang: str | None = None
) -> tuple[list[Translation], Speed]:
    """Translate ``sources`` (into ``target_lang`` for a multilingual model) and measure the time it takes."""
    start = time.perf_counter()
    translations = translator.translate_nbest(sources, progress=progress, target_lang=target_lang, scores=False)
    wall = time.perf_counter() - start
    speed = Speed(
        sentences=len(sources),
        src_tokens=sum(t.src_tokens for t in translations),
        tgt_tokens=sum(t.tgt_tokens for t in translations),
        wall_s=wall,
        threads=torch.get_num_threads(),
        device=str(translator.device),
    )
    return translations, speed


def cross_attention(translator: Translator, src_ids: list[int], tgt_ids: list[int]):
    """Last decoder layer's head-averaged cross-attention (T, S) for ``[BOS] + tgt_ids`` over ``src_ids``."""
    model, device = translator.model, translator.device
    src = torch.tensor([src_ids], device=device)  # (1, S)
    tgt_in = torch.tensor([[BOS_ID, *tgt_ids]], device=device)  # (1, T)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            weights = model.cross_attention_weights(src, torch.zeros_like(src, dtype=torch.bool), tgt_in)
    finally:
        model.train(was_training)
    return weights[0].float().cpu().numpy()  # (T, S)


def alignment_plots(
    translator: Translator,
    sources: Sequence[str],
    translations: Sequence[Translation],
    lines: Sequence[int],
    out_dir: Path,
    name: str,
    target_lang: str | None = None,
) -> list[dict[str, Any]]:
    """Cross-attention heatmaps of the best hypothesis of each 1-based line; axes labelled with pieces
    (a multilingual model's source starts with the ``target_lang`` tag, as it was translated)."""
    tokenizers = translator.tokenizers
    plots = []
    for line in lines:
        if not 1 <= line <= len(sources) or not translations[line - 1].hypotheses:
            warnings.warn(f"no alignment plot for line {line}: out of range or empty", stacklevel=2)
            continue
        src_ids = translator.encode_lines([sources[line - 1]], target_lang)[0] + [EOS_ID]
        tgt_ids = translations[line - 1].hypotheses[0].tokens
        src_pieces = [tokenizers.src.id_to_piece(i) for i in src_ids]
        tgt_pieces = [tokenizers.tgt.id_to_piece(i) for i in [*tgt_ids, EOS_ID]]  # what each row predicts
        weights = cross_attention(translator, src_ids, tgt_ids)
        path = plot_alignment(weights, src_pieces, tgt_pieces, out_dir / f"{name}.align-{line}.png")
        plots.append({"line": line, "path": path.name})
    return plots


def pick_examples(sources: Sequence[str], refs: Sequence[str], hyps: Sequence[str], n: int) -> list[dict]:
    """``n`` examples spread evenly over the test set (deterministic)."""
    count = min(n, len(sources))
    picks = sorted({round(k * (len(sources) - 1) / max(count - 1, 1)) for k in range(count)})
    return [{"line": i + 1, "source": sources[i], "reference": refs[i], "hypothesis": hyps[i]} for i in picks]


def evaluate(
    translator: Translator,
    sources: Sequence[str],
    references: Sequence[str],
    *,
    out_dir: str | Path = "reports",
    name: str = "eval",
    checkpoint: dict[str, Any] | None = None,
    data: dict[str, Any] | None = None,
    align: Sequence[int] = (1,),
    lowercase_tokenized: bool = True,
    n_examples: int = 5,
    progress: bool = False,
    target_lang: str | None = None,
) -> dict[str, Any]:
    """Translate ``sources``, score against ``references``, write the report files; return the report.

    ``checkpoint``: ``{"path", "step", "config"}`` of the model (an ensemble's first, and ``"ensemble"``:
    ``[{"path", "step"}]`` of every member); ``data``: where sources/references came
    from; ``align``: 1-based lines to draw alignment heatmaps for; ``target_lang``: the target language a
    multilingual model is asked for (None for a one-target model).
    """
    if len(sources) != len(references):
        raise ValueError(f"{len(sources)} source lines but {len(references)} reference lines")
    translations, speed = timed_translate(translator, sources, progress, target_lang)
    hyps = [t.text for t in translations]
    report = {
        "name": name,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "mt_version": __version__,
        "checkpoint": checkpoint,
        "data": {**(data or {}), "sentences": len(sources), **({"target_lang": target_lang} if target_lang else {})},
        "decoding": decode_settings(translator.cfg),
        "metrics": score(hyps, references, lowercase_tokenized=lowercase_tokenized),
        "speed": speed.as_dict(),
        "examples": pick_examples(sources, references, hyps, n_examples),
        "alignments": [],
        "hypotheses": f"{name}.hyp.txt",
    }
    with staged_files(Path(out_dir)) as stage:
        (stage / f"{name}.hyp.txt").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
        report["alignments"] = alignment_plots(translator, sources, translations, align, stage, name, target_lang)
        write_report(report, stage, name)
    return report


@contextlib.contextmanager
def staged_files(out_dir: Path) -> Iterator[Path]:
    """A staging directory inside ``out_dir`` whose files are moved into ``out_dir`` if the block succeeds.

    On failure nothing is left behind: not the staged files, not ``out_dir`` if this call created it,
    and older files of the same names are kept as they were.
    """
    created = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".staging-", dir=out_dir))
    try:
        yield stage
        for path in sorted(stage.iterdir(), key=lambda p: (p.suffix in (".json", ".md"), p.name)):  # report last
            os.replace(path, out_dir / path.name)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        if created:
            with contextlib.suppress(OSError):
                out_dir.rmdir()
        raise
    stage.rmdir()


def decode_settings(cfg: DecodeConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def write_report(report: dict[str, Any], out_dir: str | Path, name: str) -> tuple[Path, Path]:
    """``NAME.json`` and ``NAME.md`` in ``out_dir``."""
    out_dir = Path(out_dir)
    json_path, md_path = out_dir / f"{name}.json", out_dir / f"{name}.md"
    json_path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    md_path.write_text(render_markdown(report), encoding="utf-8")
    return json_path, md_path


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: dict[str, Any]) -> str:
    """The report as Markdown: metrics table, settings, speed, examples, alignment images."""
    out = [f"# Evaluation: {report['name']}", "", f"Created {report['created']} by mt {report['mt_version']}.", ""]
    ckpt = report.get("checkpoint") or {}
    members = ckpt.get("ensemble") or [ckpt]
    label = "checkpoint" if len(members) == 1 else f"an ensemble of {len(members)} checkpoints"
    where = ", ".join(f"`{m.get('path')}` (step {m.get('step')})" for m in members)
    out += [f"- {label}: {where}", f"- data: {report['data']}", ""]
    out += ["## Scores", "", "| metric | score | signature |", "| --- | ---: | --- |"]
    out += [f"| {m['name']} | {m['score']:.2f} | `{_md_escape(m['signature'])}` |" for m in report["metrics"].values()]
    out += ["", f"BLEU details: `{report['metrics']['bleu']['text']}`", ""]
    out += ["## Decoding", "", *(f"- {k}: {v}" for k, v in report["decoding"].items()), ""]
    s = report["speed"]
    out += [
        "## Speed",
        "",
        f"{s['sentences']} sentences in {s['wall_s']:.2f} s on {s['device']} with {s['threads']} threads: "
        f"{s['sentences_per_s']:.1f} sentences/s, {s['tgt_tokens_per_s']:.1f} target tokens/s "
        f"({s['src_tokens']} source pieces, {s['tgt_tokens']} generated tokens).",
        "",
        "## Examples",
        "",
    ]
    for ex in report["examples"]:
        out += [
            f"**line {ex['line']}**",
            "",
            "| | |",
            "| --- | --- |",
            f"| source | {_md_escape(ex['source'])} |",
            f"| reference | {_md_escape(ex['reference'])} |",
            f"| hypothesis | {_md_escape(ex['hypothesis'])} |",
            "",
        ]
    if report["alignments"]:
        out += ["## Cross-attention alignments (last decoder layer, heads averaged)", ""]
        out += [f"line {a['line']}:\n\n![alignment line {a['line']}]({a['path']})\n" for a in report["alignments"]]
    if ckpt.get("config") is not None:
        config = json.dumps(ckpt["config"], indent=2, ensure_ascii=False)
        out += ["## Checkpoint config", "", "<details><summary>config</summary>", "", "```json", config, "```"]
        out += ["", "</details>", ""]
    return "\n".join(out)
