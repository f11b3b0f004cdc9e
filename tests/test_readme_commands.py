"""The manual's commands work as written: README.md and the pages of docs/ cannot drift from the code.

From every shell code block and inline code span of the manual (README.md and docs/*.md but ARCHITECTURE.md):
- each entry point of pyproject's ``[project.scripts]`` answers ``--help`` (run through its ``main``);
- each ``make TARGET VAR=..`` is accepted by ``make -n`` (which prints the recipe and runs nothing);
- each ``--flag`` given to an entry point (or to a ``make`` target's program, or to ``python scripts/x.py``) is
  one that program has; in README.md a flag named on its own belongs to the entry points named before it in
  its paragraph, or else to any entry point;
- each config key (``train.precision=bf16``, or a span that is just a key) is a field of ``mt.config.Config``,
  and each ``EXP=``/``experiment=`` a preset in conf/experiment/;
- each relative link points at a file, and at a heading of it when it has an ``#anchor``.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from mt.config import Config

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MANUAL = [README, *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "ARCHITECTURE.md")]
SHELL_BLOCKS = {"", "bash", "sh", "shell", "console"}
OPERATORS = {"|", "||", "&&", ";"}
CONFIG_KEY = re.compile(r"^(?:data|model|optim|train|decode)(?:\.[a-z_]+)+$")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
PYTHON = re.compile(r"^(?:.*/)?python(?:3(?:\.\d+)?)?$")


# --- reading the manual -----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Snippet:
    """One shell line or inline code span, with where it is and the paragraph it belongs to."""

    path: Path
    line: int
    text: str
    paragraph: int  # blocks of prose split at blank lines, list items and table rows; -1 for code lines

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}: `{self.text}`"


def snippets(path: Path) -> list[Snippet]:
    """The shell lines of fenced blocks and the inline code spans of the prose (which may wrap), in order."""
    found: list[Snippet] = []
    fence: str | None = None
    prose: list[tuple[int, str]] = []  # the lines of the current paragraph
    paragraphs = 0

    def flush() -> None:
        nonlocal paragraphs
        if prose:
            text = "\n".join(line for _, line in prose).replace("\\|", "|")
            for match in re.finditer(r"`([^`]+)`", text):
                line = prose[0][0] + text.count("\n", 0, match.start())
                found.append(Snippet(path, line, " ".join(match.group(1).split()), paragraphs))
        prose.clear()
        paragraphs += 1

    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("```"):
            flush()
            fence = None if fence is not None else stripped[3:].strip()
        elif fence is not None:
            if fence in SHELL_BLOCKS and stripped:
                found.append(Snippet(path, number, stripped.removeprefix("$ "), -1))
        elif not stripped or stripped.startswith(("- ", "| ", "#")):
            flush()
            if stripped:
                prose.append((number, line))
        else:
            prose.append((number, line))
    flush()
    return found


def tokens(text: str) -> list[str]:
    """Shell words, comments dropped; ``ARGS="..."`` values are split into words of their own too."""
    lexer = shlex.shlex(text, posix=True)
    lexer.whitespace_split, lexer.commenters = True, "#"
    try:
        words = list(lexer)
    except ValueError:  # prose with an apostrophe
        words = text.split()
    expanded = []
    for word in words:
        expanded.append(word)
        if word.lstrip("[").startswith("ARGS="):
            expanded.extend(word.lstrip("[").rstrip("]").removeprefix("ARGS=").split())
    return expanded


# --- what the code offers ---------------------------------------------------------------------------------

@functools.cache
def entry_points() -> dict[str, str]:
    """Entry point name -> ``module:function``, from pyproject.toml."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def module_entry_points() -> dict[str, str]:
    """Module runnable with ``python -m`` -> its entry point."""
    modules = {target.split(":")[0]: name for name, target in entry_points().items()}
    return {**modules, "mt.train": "mt-train"}


def run_main(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run entry point ``name`` with ``args`` through its ``main``, as the console script does."""
    module, function = entry_points()[name].split(":")
    code = (f"import sys; sys.argv = [{name!r}, *{list(args)!r}]; "
            f"from {module} import {function}; sys.exit({function}())")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


@functools.cache
def help_text(name: str) -> str:
    result = run_main(name, "--help")
    assert result.returncode == 0, f"{name} --help exited {result.returncode}:\n{result.stderr}"
    text = result.stdout
    if name == "mt-train":  # a Hydra app: its flags are in --hydra-help
        hydra = run_main(name, "--hydra-help")
        assert hydra.returncode == 0, hydra.stderr
        text += hydra.stdout
    return text


@functools.cache
def program_flags(program: str) -> frozenset[str]:
    """The ``--flags`` of an entry point (from its --help) or of ``scripts/x.py`` (from its add_argument calls)."""
    if program in entry_points():
        return frozenset(FLAG.findall(help_text(program)))
    tree = ast.parse((ROOT / program).read_text())
    return frozenset(arg.value for node in ast.walk(tree)
                     if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"
                     for arg in node.args if isinstance(arg, ast.Constant) and str(arg.value).startswith("--"))


@functools.cache
def make_programs() -> dict[str, str | None]:
    """Makefile target -> the entry point or script its recipe runs (None if neither)."""
    programs, target = {}, None
    for line in (ROOT / "Makefile").read_text().splitlines():
        if match := re.match(r"^([a-z][a-z0-9-]*):", line):
            target = match.group(1)
            programs[target] = None
        elif line.startswith("\t") and target and programs[target] is None:
            if match := re.search(r"-m (mt[\w.]*)|\b(mt-[a-z]+)\b|(scripts/\w+\.py)", line):
                module, name, script = match.groups()
                programs[target] = module_entry_points().get(module) if module else name or script
    return programs


def config_has(key: str) -> bool:
    node = Config
    for part in key.split("."):
        fields = {f.name: f for f in dataclasses.fields(node)} if dataclasses.is_dataclass(node) else {}
        if part not in fields:
            return False
        node = fields[part].default_factory if callable(fields[part].default_factory) else None
        node = type(node()) if node is not None else None
    return True


def preset_exists(name: str) -> bool:
    return (ROOT / "conf" / "experiment" / f"{name}.yaml").is_file()


# --- the commands named in the manual ---------------------------------------------------------------------

@dataclasses.dataclass
class Commands:
    make: dict[tuple[str, ...], Snippet] = dataclasses.field(default_factory=dict)  # make -n argv -> where
    flags: list[tuple[str, str, Snippet]] = dataclasses.field(default_factory=list)  # (program, flag, where)
    loose_flags: list[tuple[frozenset[str], str, Snippet]] = dataclasses.field(default_factory=list)
    keys: list[tuple[str, Snippet]] = dataclasses.field(default_factory=list)
    presets: list[tuple[str, Snippet]] = dataclasses.field(default_factory=list)


def read_command(words: list[str], snippet: Snippet, found: Commands) -> str | None:
    """Record one command (the words up to a shell operator); returns the program its first flags go to."""
    program, start = "foreign", words[0]
    if start in entry_points():
        program = start
    elif PYTHON.match(start) and len(words) > 1:
        if words[1] == "-m" and len(words) > 2 and words[2] in module_entry_points():
            program = module_entry_points()[words[2]]
        elif words[1].startswith("scripts/") and words[1].endswith(".py"):
            program = words[1]
    elif start.startswith("scripts/") and start.endswith(".py"):
        program = start
    elif start == "make" and len(words) > 1 and re.fullmatch(r"[a-z][a-z0-9-]*", words[1]):
        assignments = [w.strip("[]") for w in words[2:] if re.match(r"^\[?[A-Z][A-Z0-9_]*=", w)]
        found.make.setdefault(("make", "-n", words[1], *assignments), snippet)
        program = make_programs().get(words[1]) or "foreign"
    elif start.startswith("--"):
        return None
    return program


def collect(paths: list[Path]) -> Commands:
    """Every command, flag, config key and preset that the Markdown files ``paths`` name."""
    found = Commands()
    paragraph_programs: dict[tuple[Path, int], set[str]] = {}
    for path in paths:
        for snippet in snippets(path):
            words = tokens(snippet.text)
            for word in words:
                key, _, value = word.strip("[]").partition("=")
                if key in ("EXP", "experiment") and re.fullmatch(r"[a-z0-9_]+", value):
                    found.presets.append((value, snippet))
                elif CONFIG_KEY.match(key) and (value or len(words) == 1):
                    found.keys.append((key, snippet))
            named = paragraph_programs.setdefault((path, snippet.paragraph), set())
            command: list[str] = []
            for word in [*words, "|"]:
                if word not in OPERATORS:
                    command.append(word)
                    continue
                if not command:
                    continue
                program = read_command(command, snippet, found)
                flags = [w.split("=")[0] for w in command if FLAG.fullmatch(w.split("=")[0])]
                if program in entry_points():
                    named.add(program)
                if program is None and path.name == "README.md" and snippet.paragraph >= 0:
                    found.loose_flags.extend((frozenset(named), flag, snippet) for flag in flags)
                elif program not in (None, "foreign"):
                    found.flags.extend((program, flag, snippet) for flag in flags)
                command = []
    return found


COMMANDS = collect(MANUAL)


# --- the checks -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(entry_points()))
def test_every_entry_point_answers_help(name):
    text = help_text(name)
    if name == "mt-train":
        assert "experiment:" in text and "== Flags ==" in text, text
    else:
        assert f"usage: {name}" in text, text


def test_the_readme_names_every_entry_point():
    text = README.read_text(encoding="utf-8")
    assert [name for name in entry_points() if name not in text] == []


@pytest.mark.parametrize("argv", sorted(COMMANDS.make), ids=" ".join)
def test_make_accepts_each_named_target(argv):
    venv_before = (ROOT / ".venv").exists()
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    result = subprocess.run(list(argv), cwd=ROOT, env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, f"{COMMANDS.make[argv].where()}\n{' '.join(argv)}: {result.stderr}"
    assert (ROOT / ".venv").exists() == venv_before  # -n printed the install, it did not run it


def test_the_manual_names_make_targets():
    assert {argv[2] for argv in COMMANDS.make} >= {"train", "test", "translate", "eval", "export", "lint"}


def test_every_flag_given_to_a_program_is_one_it_has():
    wrong = [f"{where.where()}: {program} has no {flag}" for program, flag, where in COMMANDS.flags
             if flag not in program_flags(program)]
    assert COMMANDS.flags, "the manual names none"
    assert not wrong, "\n".join(wrong)


def test_every_flag_named_on_its_own_in_the_readme_exists():
    wrong = []
    for programs, flag, where in COMMANDS.loose_flags:
        owners = programs or frozenset(entry_points())
        missing = sorted(p for p in owners if flag not in program_flags(p))
        if (programs and missing) or (not programs and len(missing) == len(owners)):
            wrong.append(f"{where.where()}: {flag} is not a flag of {', '.join(missing)}")
    assert COMMANDS.loose_flags, "the manual names none"
    assert not wrong, "\n".join(wrong)


def test_every_config_key_exists():
    wrong = [f"{where.where()}: no config key {key}" for key, where in COMMANDS.keys if not config_has(key)]
    assert COMMANDS.keys, "the manual names none"
    assert not wrong, "\n".join(wrong)


def test_every_preset_exists():
    wrong = [f"{where.where()}: no conf/experiment/{name}.yaml" for name, where in COMMANDS.presets
             if not preset_exists(name)]
    assert COMMANDS.presets, "the manual names none"
    assert not wrong, "\n".join(wrong)


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.DOTALL)
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, flags=re.MULTILINE)}


@pytest.mark.parametrize("path", MANUAL, ids=lambda p: p.name)
def test_every_relative_link_resolves(path):
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.DOTALL)
    wrong = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.exists():
            wrong.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            wrong.append(f"{target}: no heading with that anchor")
    assert not wrong, f"{path.relative_to(ROOT)}: " + "; ".join(wrong)


def test_the_checks_see_wrong_commands(tmp_path):
    """A made-up manual with one mistake of each kind: every one is collected where the checks above find it."""
    manual = tmp_path / "README.md"
    manual.write_text(
        "```bash\n"
        'make translate CKPT=x ARGS="--beem 5" && mt-eval --no-such-flag\n'
        "```\n\n"
        "Flags of `mt-export`: `--to`,\n`--quantisation`. Also `train.no_such_key` and `EXP=no_such_preset`.\n",
        encoding="utf-8")
    found = collect([manual])
    assert ("make", "-n", "translate", "CKPT=x", "ARGS=--beem 5") in found.make
    flags = {(program, flag) for program, flag, _ in found.flags}
    assert flags == {("mt-translate", "--beem"), ("mt-eval", "--no-such-flag")}
    assert not any(flag in program_flags(program) for program, flag in flags)
    loose = {(programs, flag) for programs, flag, _ in found.loose_flags}
    assert loose == {(frozenset({"mt-export"}), "--to"), (frozenset({"mt-export"}), "--quantisation")}
    assert "--to" in program_flags("mt-export") and "--quantisation" not in program_flags("mt-export")
    assert [key for key, _ in found.keys] == ["train.no_such_key"] and not config_has("train.no_such_key")
    assert [name for name, _ in found.presets] == ["no_such_preset"] and not preset_exists("no_such_preset")
    assert config_has("data.hub.name") and config_has("train.precision")
