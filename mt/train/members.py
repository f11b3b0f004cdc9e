"""An ensemble from one command: ``train.members=N`` trains N models one after another, then tests them as one.

Member k (1-based) is the configured run with seed ``train.seed + k - 1``, a ``train.max_time_minutes / N``
budget (fewer members when that is under ``train.member_min_minutes``: ``members_that_fit``) and its own
directory ``<run_dir>/member_<k>`` (its checkpoints, metrics, plots, averaging and its choice on valid, as any
run). ``train.later_members`` changes the model and optim groups of every member after the first (another
architecture: a more diverse ensemble). ``<run_dir>/ensemble.json`` records the members' chosen checkpoints:
``--exp`` of mt-translate, mt-eval and mt-serve then decodes them as one ensemble (``mt.runs``). Rerunning the
command resumes where it stopped: a finished member stops at once (its budget is spent) and keeps its choice, the
interrupted one resumes exactly. The test split is then translated by the members' chosen checkpoints as one
ensemble (``mt.model.Ensemble``: their mean probabilities) into ``<run_dir>/test_results.json``. On Multi30k
two 55-minute 6+6 models together scored +0.95 BLEU on test2016 over each alone (docs/recipes.md). With
``train.distill`` the later members also learn from the first member's translations (``mt.train.distill``).
One process only: not under torchrun.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

from mt import __version__
from mt.config import Config, ConfigError, TrainConfig, with_changes
from mt.runs import experiment_dir, write_ensemble_record
from mt.train.distill import check_distillable
from mt.train.summary import RunSummary


def members_that_fit(tc: TrainConfig) -> int:
    """How many members train: ``train.members``, or fewer when ``max_time_minutes / members`` is under
    ``train.member_min_minutes`` (as many as get that budget, at least 1). On Multi30k (greedy valid BLEU) two
    6+6 members of 56 minutes beat one model of 112 (42.62 against 42.12), two of 27.5 lose to one of 55 (40.64
    against 41.01 +- 0.24; docs/recipes.md, "Ensembles")."""
    if tc.member_min_minutes <= 0 or tc.max_time_minutes <= 0:
        return tc.members
    return max(1, min(tc.members, math.floor(tc.max_time_minutes / tc.member_min_minutes)))


def fewer_members_note(tc: TrainConfig, count: int) -> str:
    """What the log says when ``members_that_fit`` is below ``train.members``."""
    what = "one model" if count == 1 else f"{count} members"
    return (f"train.members={tc.members}: {tc.max_time_minutes:g} minutes give each member less than "
            f"train.member_min_minutes={tc.member_min_minutes:g}; training {what} instead")


def member_configs(cfg: Config) -> list[Config]:
    """The run of each member (module doc)."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError(
            [f"train.members={cfg.train.members}: the members train in one process; run it without torchrun"]
        )
    count, tc = members_that_fit(cfg.train), cfg.train
    if tc.distill and count > 1:
        check_distillable(cfg)
    later = with_changes(cfg, dataclasses.asdict(tc.later_members), "train.later_members") if count > 1 else cfg
    return [
        dataclasses.replace(member, train=dataclasses.replace(
            tc, members=1, seed=tc.seed + k, run_dir=str(Path(tc.run_dir) / f"member_{k + 1}"),
            max_time_minutes=tc.max_time_minutes / count, test_at_end=False,
        ))
        for k, member in enumerate([cfg] + [later] * (count - 1))
    ]


def later_member_changes(tc: TrainConfig) -> str:
    """``train.later_members`` as the log's member line shows it: ``, model.d_model=256 ...`` ("" for none)."""
    changes = [f"{group}.{key}={value}" for group, fields in dataclasses.asdict(tc.later_members).items()
               for key, value in fields.items()]
    return f", {' '.join(changes)}" if changes else ""


def ensemble_summary(cfg: Config, members: list[RunSummary], test: dict, samples: list) -> RunSummary:
    """Record the members' choice (``mt.runs``) and the ensemble's test scores; print where everything is."""
    run_dir = Path(cfg.train.run_dir)
    chosen = [m.best_checkpoint for m in members]
    write_ensemble_record(run_dir, chosen)
    if test:
        results = {**test, "mt_version": __version__}  # test["members"]: the chosen checkpoints
        (run_dir / "test_results.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = ["", f"Finished an ensemble of {len(members)} members in {run_dir}:"]
    for k, member in enumerate(members):
        lines.append(f"  member {k + 1}: {member.step} updates ({member.reason}), chosen {member.best_checkpoint}")
    if test:
        lines.append(f"  test BLEU     : {test['bleu']:.2f}  chrF {test['chrf']:.2f}  ({test['bleu_signature']})")
    for src, ref, hyp in samples:
        lines += [f"  SRC {src}", f"  REF {ref}", f"  HYP {hyp}", ""]
    by_name = run_dir.resolve() == experiment_dir(cfg.name).resolve()
    how = f"EXP={cfg.name}" if by_name else f'CKPT="{" ".join(map(str, chosen))}"'
    lines.append(f"Translate with: echo 'some text' | make translate {how}")
    print("\n".join(lines), flush=True)
    return RunSummary(run_dir, "members", sum(m.step for m in members), None, test, [], samples)
