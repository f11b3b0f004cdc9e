"""Bad input at every entry point: one clear line on stderr, the right exit status, no traceback, nothing left.

Each case runs the real command in its own process (``python -m mt.train`` / ``mt.cli.translate`` /
``mt.cli.evaluate`` / ``mt.cli.plots``, forked from an interpreter that has imported torch once:
``forked_python``; a test below compares it with a fresh interpreter) in a fresh working directory and checks:
- the exit status: 2 for usage errors (argparse, a bad Hydra override), 1 for the other expected errors;
- the message: ``PROG: error: ...`` in at most 3 lines, naming what is wrong and where (the file and
  line, ``key=value``, the flag, the device);
- no ``Traceback`` on stderr;
- nothing left behind: every file under the working directory is as it was (no empty output, no
  report, no run directory, no checkpoint), byte for byte.
Arguments may name ``{tmp}`` (the working directory), ``{run}`` and ``{ckpt}`` (a run trained once for
the module, and its best.pt) and ``{cache}`` (the module's data cache).
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from forked_python import Zygote
from helpers import TINY

from mt.cli.errors import UsageError, pop_debug_flag, run_command
from mt.cli.output import atomic_output
from mt.errors import UserError

REPO = Path(__file__).resolve().parents[1]
GOOD_EN = "one\ntwo\nthree\n"
GOOD_DE = "eins\nzwei\ndrei\n"
LONG_LINE = "twenty-one " * 300  # far more source pieces than the tiny model's 255 positions


def at(name: str, line: int) -> str:
    """A pattern for ``name:line`` (also accepts ``name line N`` / ``name at line N``)."""
    return rf"{re.escape(name)}(:| line | at line ){line}\b"


def lit(text: str) -> str:
    return re.escape(text)


Setup = Callable[[Path, dict[str, Path]], object]  # (working dir, the trained run's paths)


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]
    status: int
    expect: tuple[str, ...]  # regexes the error message must match
    setup: Setup | None = None  # writes the case's files into the working directory
    stdin: bytes = b""

    def __str__(self) -> str:
        return self.id


# ------------------------------------------------------------------------------------------ helpers


def command_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MT_DEBUG", "HYDRA_FULL_ERROR")}
    env.update(PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]), OMP_NUM_THREADS="1",
               HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", PYTHONUNBUFFERED="1")
    return env


ZYGOTES: list[Zygote] = []  # the module's one zygote, started by the first command, closed by ``zygote``


@pytest.fixture(scope="module", autouse=True)
def zygote():
    yield
    while ZYGOTES:
        ZYGOTES.pop().close()


def run_module(module: str, args: list[str], cwd: Path, stdin: bytes = b"") -> subprocess.CompletedProcess:
    """``python -m module args`` in ``cwd``, forked from the module's zygote."""
    if not ZYGOTES:
        ZYGOTES.append(Zygote(command_env()))
    return ZYGOTES[0].run(module, args, cwd, stdin)


def run_in_a_fresh_interpreter(module: str, args: list[str], cwd: Path, stdin: bytes = b"",
                               ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, input=stdin, capture_output=True,
                          env=command_env(), timeout=300)


def snapshot(root: Path, ignore: tuple[str, ...] = ()) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (None for a directory), but those matching an ``ignore`` glob."""
    paths = [p for p in sorted(root.rglob("*")) if not any(p.relative_to(root).match(g) for g in ignore)]
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in paths}


def check_failure(result: subprocess.CompletedProcess, prog: str, case: Case, before: dict, after: dict) -> None:
    err = result.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err, err
    assert result.returncode == case.status, f"exit {result.returncode}, expected {case.status}:\n{err}"
    assert f"{prog}: error: " in err, err
    message = err[err.index(f"{prog}: error: "):].strip()
    assert len(message.splitlines()) <= 3, message
    for pattern in case.expect:
        assert re.search(pattern, message), f"{pattern!r} not in {message!r}"
    assert after == before, f"left behind or changed: {sorted(set(after) ^ set(before)) or 'file contents'}"


def write(path: Path, data: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)


def files(**named: str | bytes) -> Setup:
    """Files in the working directory: ``files(in_txt="...")`` writes ``in.txt``."""
    return lambda tmp, _: [write(tmp / name.replace("_", "."), data) for name, data in named.items()]


GOOD_SPLIT = {"en": GOOD_EN, "de": GOOD_DE, "tsv": "one\teins\ntwo\tzwei\n",
              "jsonl": '{"en": "one", "de": "eins"}\n{"translation": {"en": "two", "de": "zwei"}}\n'}


def data_dir(**train: str | bytes) -> Setup:
    """``data/`` with the given train files (``train_en=``, ``train_en_gz=``, ``train_tsv=``, ...) and
    good val/test files of the same format."""
    suffixes = {key.split("_")[1] for key in train}
    formats = [f for f in ("tsv", "jsonl") if f in suffixes] or ["en", "de"]

    def setup(tmp: Path, _: dict[str, Path]) -> None:
        for split in ("val", "test"):
            for fmt in formats:
                write(tmp / "data" / f"{split}.{fmt}", GOOD_SPLIT[fmt])
        for key, content in train.items():
            write(tmp / "data" / key.replace("_", "."), content)

    return setup


# ------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, Path]:
    """A tiny run trained for 2 updates (the checkpoint every translate/eval case uses) and its data cache."""
    root = tmp_path_factory.mktemp("cli_errors")
    run, cache = root / "run", root / "cache"
    result = run_module("mt.train", [*TINY, f"train.run_dir={run}", f"data.cache_dir={cache}", "train.threads=1",
                                     "train.max_updates=2", "train.validate_every=2", "train.save_every=2"], root)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    return {"run": run, "ckpt": run / "checkpoints" / "best.pt", "cache": cache}


def run_case(
    module: str, prog: str, case: Case, tmp: Path, trained: dict[str, Path], prefix: list[str],
    ignore: tuple[str, ...] = (),
) -> None:
    if case.setup is not None:
        case.setup(tmp, trained)
    names = {"tmp": tmp, **trained}
    args = prefix + [arg.format(**names) for arg in case.args]
    before = snapshot(tmp, ignore)
    result = run_module(module, args, tmp, case.stdin)
    check_failure(result, prog, case, before, snapshot(tmp, ignore))


# ------------------------------------------------------------------------------------------ mt-train


def copy_trained_run(tmp: Path, trained: dict[str, Path]) -> None:
    shutil.copytree(trained["run"], tmp / "run")


FILES = ("data.source=files", "data.dir={tmp}/data")
TAKEN = files(taken="a file where a directory belongs\n")
TRAIN_CASES = [
    # Hydra's own override errors: usage errors naming key=value
    Case("wrong-type", ("model.d_model=abc",), 2, (lit("model.d_model=abc"), "Integer")),
    Case("unknown-key", ("train.nonexistent=1",), 2, (lit("train.nonexistent=1"), "unknown key")),
    Case("unknown-group-option", ("model=transformer_huge",), 2, (lit("model=transformer_huge"), "transformer_base")),
    Case("override-syntax", ("train.seed=1=2",), 2, (lit("train.seed=1=2"),)),
    # config values (ConfigError at compose time)
    Case("validate-every-0", ("train.validate_every=0",), 1, (lit("train.validate_every"),)),
    Case("negative-dropout", ("model.dropout=-0.5",), 1, (lit("model.dropout"),)),
    Case("heads-not-dividing-d_model", ("model.heads=3",), 1, (lit("model.heads"),)),
    Case("beam-size-0", ("decode.beam_size=0",), 1, (lit("decode.beam_size"),)),
    Case("unknown-data-format", (*FILES, "data.format=xml"), 1, (lit("data.format"), "xml"), data_dir()),
    # paths
    Case("run-dir-is-a-file", ("train.run_dir={tmp}/taken",), 1, (lit("train.run_dir"), "taken"),
         TAKEN),
    Case("run-dir-under-a-file", ("train.run_dir={tmp}/taken/run",), 1, (lit("train.run_dir"), "taken"),
         TAKEN),
    Case("data-dir-missing", ("data.source=files", "data.dir={tmp}/nowhere"), 1, ("nowhere",)),
    Case("data-dir-is-a-file", ("data.source=files", "data.dir={tmp}/taken"), 1, ("taken",), TAKEN),
    # data files
    Case("missing-target-file", FILES, 1, (lit("train.de"),), data_dir(train_en=GOOD_EN)),
    Case("empty-files", FILES, 1, ("train", "empty"), data_dir(train_en="", train_de="")),
    Case("line-counts-differ", FILES, 1, (lit("train.en"), lit("train.de"), r"\b3\b", r"\b2\b"),
         data_dir(train_en=GOOD_EN, train_de="eins\nzwei\n")),
    Case("invalid-utf8", FILES, 1, (at("train.en", 2), "UTF-8"),
         data_dir(train_en=b"one\ntw\xffo\nthree\n", train_de=GOOD_DE)),
    Case("corrupt-gz", FILES, 1, (lit("train.en.gz"),),
         data_dir(train_en_gz=b"this is not gzip data", train_de=GOOD_DE)),
    Case("truncated-gz", FILES, 1, (lit("train.en.gz"),),
         data_dir(train_en_gz=gzip.compress(GOOD_EN.encode() * 50)[:40], train_de=GOOD_DE)),
    Case("tsv-without-tab", (*FILES, "data.format=tsv"), 1, (at("train.tsv", 2),),
         data_dir(train_tsv="one\teins\ntwo zwei\n")),
    Case("jsonl-bad-json", (*FILES, "data.format=jsonl"), 1, (at("train.jsonl", 2), "JSON"),
         data_dir(train_jsonl='{"en": "one", "de": "eins"}\n{"en": "two", \n')),
    Case("jsonl-missing-field", (*FILES, "data.format=jsonl"), 1, (at("train.jsonl", 1), "'de'"),
         data_dir(train_jsonl='{"en": "one"}\n')),
    # device, checkpoint
    Case("cuda-without-cuda", ("train.device=cuda",), 1, ("cuda",)),
    Case("rerun-with-another-model", ("model.d_model=64",), 1, ("d_model",), copy_trained_run),
]


@pytest.mark.parametrize("case", TRAIN_CASES, ids=str)
def test_train_bad_input(case: Case, tmp_path: Path, trained: dict[str, Path]) -> None:
    """Hydra rewrites ``.hydra/`` and appends to the job log of an existing run dir on every start: not compared."""
    prefix = [*TINY, f"train.run_dir={tmp_path / 'run'}", f"data.cache_dir={trained['cache']}", "train.threads=1",
              "train.max_updates=2"]  # should a case not fail, it ends soon
    run_case("mt.train", "mt-train", case, tmp_path, trained, prefix, ignore=("run/.hydra", "run/.hydra/*", "*.log"))
    if case.setup is not copy_trained_run:
        assert not (tmp_path / "run").exists()  # a fresh run dir that failed to start is removed


def test_train_error_leaves_no_directory_it_created(tmp_path: Path, trained: dict[str, Path]) -> None:
    """Regression: the default run dir runs/<name> left an empty runs/ behind after a failed start."""
    result = run_module("mt.train", [*TINY, f"data.cache_dir={trained['cache']}", "train.validate_every=0"], tmp_path)
    assert result.returncode == 1 and b"train.validate_every=0" in result.stderr
    result = run_module("mt.train", [*TINY, "train.run_dir=runs/a/b", f"data.cache_dir={trained['cache']}",
                                     "train.device=cuda"], tmp_path)
    assert result.returncode == 1 and b"cuda" in result.stderr
    assert snapshot(tmp_path) == {}


# ------------------------------------------------------------------------------------------ mt-translate


def truncated_checkpoint(tmp: Path, trained: dict[str, Path]) -> None:
    data = trained["ckpt"].read_bytes()
    write(tmp / "half.pt", data[: len(data) // 2])


IN = ("--ckpt", "{ckpt}", "--input", "{tmp}/in.txt")
TRANSLATE_CASES = [
    Case("missing-checkpoint", ("--ckpt", "{tmp}/nope.pt"), 1, ("checkpoint not found", "nope.pt")),
    Case("default-checkpoint-missing", ("--exp", "nothing_here"), 1, (lit("runs/nothing_here/checkpoints/best.pt"),)),
    Case("checkpoint-is-a-directory", ("--ckpt", "{run}"), 1, ("is a directory", "best.pt")),
    Case("garbage-checkpoint", ("--ckpt", "{tmp}/junk.pt"), 1, (lit("junk.pt"), "corrupt"),
         files(junk_pt=b"\x00garbage" * 100)),
    Case("truncated-checkpoint", ("--ckpt", "{tmp}/half.pt"), 1, (lit("half.pt"), "truncated"), truncated_checkpoint),
    Case("input-missing", ("--ckpt", "{ckpt}", "--input", "{tmp}/nope.txt"), 1, (lit("--input"), "nope.txt")),
    Case("input-is-a-directory", ("--ckpt", "{ckpt}", "--input", "{tmp}"), 1, (lit("--input"), "directory")),
    Case("input-invalid-utf8", IN, 1, (at("in.txt", 2), "UTF-8"), files(in_txt=b"one\ntw\xe9o\n")),
    Case("input-corrupt-gz", ("--ckpt", "{ckpt}", "--input", "{tmp}/in.txt.gz"), 1, (lit("in.txt.gz"),),
         files(in_txt_gz=b"plain text, not gzip\n")),
    Case("stdin-invalid-utf8", ("--ckpt", "{ckpt}"), 1, (at("<stdin>", 3), "UTF-8"), stdin=b"one\ntwo\n\xff\xfe\n"),
    Case("output-dir-missing", (*IN, "--output", "{tmp}/nodir/out.txt"), 1, (lit("--output"), "nodir"),
         files(in_txt=GOOD_EN)),
    Case("output-is-a-directory", (*IN, "--output", "{tmp}"), 1, (lit("--output"), "directory"),
         files(in_txt=GOOD_EN)),
    Case("output-under-a-file", (*IN, "--output", "{tmp}/in.txt/out.txt"), 1, (lit("--output"), "not a directory"),
         files(in_txt=GOOD_EN)),
    Case("reject-keeps-old-output", (*IN, "--output", "{tmp}/out.txt", "--on-too-long", "reject"), 1,
         (at("in.txt", 2), "reject"),
         files(in_txt=f"one\n{LONG_LINE}\n", out_txt="an older file\n")),
    Case("device-cuda", ("--ckpt", "{ckpt}", "--device", "cuda"), 1, ("cuda",)),
    Case("device-unknown", ("--ckpt", "{ckpt}", "--device", "tpu7"), 1, ("tpu7",)),
    Case("beam-0", ("--ckpt", "{ckpt}", "--beam", "0"), 2, (lit("--beam"), r"\b0\b")),
    Case("beam-not-a-number", ("--ckpt", "{ckpt}", "--beam", "four"), 2, (lit("--beam"), "four")),
    Case("top-p-above-1", ("--ckpt", "{ckpt}", "--top-p", "1.5"), 2, (lit("--top-p"), lit("1.5"))),
    Case("temperature-0", ("--ckpt", "{ckpt}", "--temperature", "0"), 2, (lit("--temperature"),)),
    Case("nbest-above-beam", ("--ckpt", "{ckpt}", "--beam", "2", "--nbest", "3"), 2, (lit("--nbest 3"), lit("--beam"))),
    Case("unknown-strategy", ("--ckpt", "{ckpt}", "--strategy", "best"), 2, (lit("--strategy"), "best")),
    Case("workers-0", ("--ckpt", "{ckpt}", "--workers", "0"), 2, (lit("--workers"), r"\b0\b")),
    # with decoding processes started, the same one-line errors (and the processes stopped)
    Case("workers-input-invalid-utf8", (*IN, "--workers", "2"), 1, (at("in.txt", 2), "UTF-8"),
         files(in_txt=b"one\ntw\xe9o\n")),
    Case("workers-reject-keeps-old-output", (*IN, "--output", "{tmp}/out.txt", "--on-too-long", "reject",
                                             "--workers", "2"), 1, (at("in.txt", 2), "reject"),
         files(in_txt=f"one\n{LONG_LINE}\n", out_txt="an older file\n")),
]


@pytest.mark.parametrize("case", TRANSLATE_CASES, ids=str)
def test_translate_bad_input(case: Case, tmp_path: Path, trained: dict[str, Path]) -> None:
    run_case("mt.cli.translate", "mt-translate", case, tmp_path, trained, [])


def test_translate_stdin_bom_crlf_gives_clean_lines(tmp_path: Path, trained: dict[str, Path]) -> None:
    """The positive control of the stdin cases: BOM and CRLF accepted, one output line per input, no CR."""
    result = run_module("mt.cli.translate", ["--ckpt", str(trained["ckpt"]), "--strategy", "greedy",
                                             "--max-len-b", "3"], tmp_path, b"\xef\xbb\xbfone\r\n\r\ntwo\r\n")
    assert result.returncode == 0, result.stderr.decode()
    assert b"\r" not in result.stdout and result.stdout.count(b"\n") == 3
    assert result.stdout.split(b"\n")[1] == b""  # the empty line stays empty


def test_translate_output_is_written_whole(tmp_path: Path, trained: dict[str, Path]) -> None:
    write(tmp_path / "in.txt", GOOD_EN)
    write(tmp_path / "out.txt", "an older file\n")
    result = run_module("mt.cli.translate", ["--ckpt", str(trained["ckpt"]), "--input", "in.txt", "--output",
                                             "out.txt", "--max-len-b", "2"], tmp_path)
    assert result.returncode == 0, result.stderr.decode()
    assert (tmp_path / "out.txt").read_text().count("\n") == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.txt"]  # no temporary file left


# ------------------------------------------------------------------------------------------ mt-eval


def eval_files(src: str | bytes = GOOD_EN, ref: str | bytes = GOOD_DE, **more: str | bytes) -> Setup:
    return files(src_en=src, ref_de=ref, **more)


SRC_REF = ("--ckpt", "{ckpt}", "--src", "{tmp}/src.en", "--ref", "{tmp}/ref.de", "--out-dir", "{tmp}/reports")
EVAL_CASES = [
    Case("lengths-differ", SRC_REF, 1, (lit("src.en"), lit("ref.de"), r"\b3\b", r"\b2\b"),
         eval_files(ref="eins\nzwei\n")),
    Case("src-missing", SRC_REF, 1, (lit("--src"), "src.en"), files(ref_de=GOOD_DE)),
    Case("ref-is-a-directory", (*SRC_REF[:5], "{tmp}", *SRC_REF[6:]), 1, (lit("--ref"), "directory"),
         files(src_en=GOOD_EN)),
    Case("src-invalid-utf8", SRC_REF, 1, (at("src.en", 2), "UTF-8"), eval_files(src=b"one\n\xc3\x28\nthree\n")),
    Case("out-dir-is-a-file", (*SRC_REF[:7], "{tmp}/src.en"), 1, (lit("--out-dir"), "not a directory"), eval_files()),
    Case("out-dir-under-a-file", (*SRC_REF[:7], "{tmp}/src.en/reports"), 1, (lit("--out-dir"), "not a directory"),
         eval_files()),
    Case("garbage-checkpoint", ("--ckpt", "{tmp}/junk.pt", *SRC_REF[2:]), 1, (lit("junk.pt"),),
         eval_files(junk_pt=b"PK\x03\x04 not a zip")),
    Case("missing-checkpoint", ("--ckpt", "{tmp}/nope.pt", *SRC_REF[2:]), 1, ("checkpoint not found", "nope.pt"),
         eval_files()),
    Case("reject-too-long", (*SRC_REF, "--on-too-long", "reject"), 1, (at("src.en", 2), "reject"),
         eval_files(src=f"one\n{LONG_LINE}\nthree\n")),
    Case("device-cuda", (*SRC_REF, "--device", "cuda"), 1, ("cuda",), eval_files()),
    Case("src-without-ref", ("--ckpt", "{ckpt}", "--src", "{tmp}/src.en"), 2, (lit("--split"),), eval_files()),
    Case("name-with-directory", (*SRC_REF, "--name", "../elsewhere"), 2, (lit("--name"),), eval_files()),
    Case("align-line-0", (*SRC_REF, "--align", "0"), 2, (lit("--align"),), eval_files()),
]


@pytest.mark.parametrize("case", EVAL_CASES, ids=str)
def test_eval_bad_input(case: Case, tmp_path: Path, trained: dict[str, Path]) -> None:
    run_case("mt.cli.evaluate", "mt-eval", case, tmp_path, trained, [])


# ------------------------------------------------------------------------------------------ mt-plots

PLOTS_CASES = [
    Case("no-run-dir", ("{tmp}/runs/nothing",), 1, (lit("metrics.jsonl"), "nothing")),
    Case("no-argument", (), 2, ("run_dir",)),
]


@pytest.mark.parametrize("case", PLOTS_CASES, ids=str)
def test_plots_bad_input(case: Case, tmp_path: Path, trained: dict[str, Path]) -> None:
    run_case("mt.cli.plots", "mt-plots", case, tmp_path, trained, [])


def case_named(cases: list[Case], name: str) -> Case:
    return next(case for case in cases if case.id == name)


FORK_CHECKS = [  # one of each kind: Hydra's usage error, stdin, a started decoding process pool, a checkpoint
    ("mt.train", case_named(TRAIN_CASES, "wrong-type"), [*TINY, "train.max_updates=2"]),
    ("mt.cli.translate", case_named(TRANSLATE_CASES, "stdin-invalid-utf8"), []),
    ("mt.cli.translate", case_named(TRANSLATE_CASES, "workers-input-invalid-utf8"), []),
    ("mt.cli.evaluate", case_named(EVAL_CASES, "missing-checkpoint"), []),
]


@pytest.mark.parametrize(("module", "case", "prefix"), FORK_CHECKS, ids=[case.id for _, case, _ in FORK_CHECKS])
def test_a_forked_command_does_what_a_fresh_interpreter_does(
    module: str, case: Case, prefix: list[str], tmp_path: Path, trained: dict[str, Path]
) -> None:
    """The cases above run forked from a zygote (``forked_python``); here a few also run in a fresh
    interpreter, in the same directory: the same exit status, stdout and stderr, byte for byte."""
    if case.setup is not None:
        case.setup(tmp_path, trained)
    args = prefix + [arg.format(tmp=tmp_path, **trained) for arg in case.args]
    forked = run_module(module, args, tmp_path, case.stdin)
    fresh = run_in_a_fresh_interpreter(module, args, tmp_path, case.stdin)
    assert forked.returncode == case.status and forked.stderr.strip()
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)


def test_debug_shows_the_traceback_of_expected_errors(tmp_path: Path, trained: dict[str, Path]) -> None:
    result = run_module("mt.cli.translate", ["--ckpt", "nope.pt", "--debug"], tmp_path)
    err = result.stderr.decode()
    assert result.returncode == 1 and "Traceback" in err and "mt-translate: error: checkpoint not found" in err
    hydra = run_module("mt.train", ["--debug", "model.d_model=abc"], tmp_path)
    assert hydra.returncode == 2 and "Traceback" in hydra.stderr.decode()
    assert snapshot(tmp_path) == {}  # nothing written by either


# ------------------------------------------------------------------------------------------ the helpers, in process


def raising(error: BaseException) -> Callable[[], None]:
    def command() -> None:
        raise error

    return command


def test_run_command_turns_expected_errors_into_one_line_and_a_status(capsys, monkeypatch) -> None:
    monkeypatch.delenv("MT_DEBUG", raising=False)
    assert run_command("mt-x", lambda: None) == 0 and run_command("mt-x", lambda: 3) == 3
    assert run_command("mt-x", raising(UserError("a.txt:3: bad line"))) == 1
    assert capsys.readouterr().err == "mt-x: error: a.txt:3: bad line\n"
    assert run_command("mt-x", raising(UsageError("--beam 0: must be >= 1"))) == 2
    assert capsys.readouterr().err == "mt-x: error: --beam 0: must be >= 1\n"
    assert run_command("mt-x", raising(FileNotFoundError(2, "No such file or directory", "in.txt"))) == 1
    assert capsys.readouterr().err == "mt-x: error: in.txt: No such file or directory\n"
    assert run_command("mt-x", raising(KeyboardInterrupt())) == 130
    assert capsys.readouterr().err.strip() == "mt-x: interrupted"
    with pytest.raises(ZeroDivisionError):  # a bug keeps its traceback
        run_command("mt-x", raising(ZeroDivisionError("bug")))


def test_debug_prints_the_traceback_first(capsys, monkeypatch) -> None:
    monkeypatch.setenv("MT_DEBUG", "1")
    assert run_command("mt-x", raising(UserError("bad"))) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and err.endswith("mt-x: error: bad\n")
    monkeypatch.setenv("MT_DEBUG", "0")
    assert run_command("mt-x", raising(UserError("bad"))) == 1 and "Traceback" not in capsys.readouterr().err
    assert pop_debug_flag(["a=1", "--debug", "b=2"]) == (["a=1", "b=2"], True)


def test_atomic_output_replaces_the_file_only_on_success(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("old\n")
    with pytest.raises(RuntimeError), atomic_output(target) as f:
        f.write("half")
        raise RuntimeError("translation failed")
    assert target.read_text() == "old\n" and list(tmp_path.iterdir()) == [target]
    with atomic_output(target) as f:
        f.write("new\n")
    assert target.read_text() == "new\n" and list(tmp_path.iterdir()) == [target]
    fresh = tmp_path / "fresh.txt"
    with atomic_output(fresh) as f:
        f.write("x\n")
    umask = os.umask(0)
    os.umask(umask)
    assert fresh.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600


def test_atomic_output_writes_into_a_device_instead_of_replacing_it() -> None:
    devnull = Path(os.devnull)
    with atomic_output(devnull) as f:
        f.write("discarded\n")
    assert devnull.is_char_device()
