"""mt-serve's model list: repeated --ckpt/--ct2 flags, a --models file (its errors named), and SIGHUP re-reading
it while requests are in flight (none dropped, the new list served after)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
from export_helpers import demo_sources, untrained_checkpoint
from serve_helpers import reference, torch_engine, wait_healthy
from test_serve_shutdown import free_port

from mt.cli.serve import load_models, main, parse_args

WAIT_S = 60
LINES = demo_sources(3)


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    base = tmp_path_factory.mktemp("model_list")
    return {
        "en-de": untrained_checkpoint(base / "en-de.pt"),
        "de-en": untrained_checkpoint(base / "de-en.pt", "data.src_lang=de", "data.tgt_lang=en", "model.d_ff=48"),
        "en-de-new": untrained_checkpoint(base / "en-de-new.pt", "model.d_ff=40"),
    }


def run(capsys, *argv: str) -> tuple[int, str]:
    status = main(list(argv))
    return status, capsys.readouterr().err.strip().splitlines()[-1]


def test_a_repeated_ckpt_is_another_model_and_several_paths_one_ensemble(ckpts):
    models = load_models(parse_args(["--ckpt", str(ckpts["en-de"]), "--ckpt", str(ckpts["de-en"]),
                                     "--ckpt", str(ckpts["en-de"]), str(ckpts["en-de"])]))
    assert [m.name for m in models.models] == ["en-de", "de-en", "en-de-2"]
    assert models.models[2].engine.description.startswith(f"{ckpts['en-de']} + {ckpts['en-de']} on ")
    assert models.router.describe() == "served: en -> de; de -> en"


def test_lazy_models_are_checked_but_not_loaded_at_start(ckpts):
    models = load_models(parse_args(["--ckpt", str(ckpts["en-de"]), "--ckpt", str(ckpts["de-en"]), "--lazy"]))
    assert [m.engine for m in models.models] == [None, None]
    assert [m.spec.languages.source for m in models.models] == ["en", "de"]


def test_a_models_file_names_its_models_and_paths_relative_to_it(ckpts, tmp_path):
    (tmp_path / "models.toml").write_text(
        f'[[model]]\nname = "back"\nckpt = "{ckpts["de-en"]}"\n\n'
        f'[[model]]\nckpt = ["{os.path.relpath(ckpts["en-de"], tmp_path)}"]\nprecision = "int8"\n'
        f'target_lang = "nl"\n', encoding="utf-8")
    models = load_models(parse_args(["--models", str(tmp_path / "models.toml"), "--lazy"]))
    assert [(m.name, m.spec.languages.source, m.spec.languages.targets) for m in models.models] == [
        ("back", "de", ("en",)), ("en-nl", "en", ("nl",))]


@pytest.mark.parametrize("text, error", [
    ("", "no [[model]] entries"),
    ("[[model]]\nckpt = 'a.pt'\nbeam = 4\n", "model 1: unknown key beam (known: ckpt, ct2, name, precision, "
                                            "source_lang, target_lang)"),
    ("[[model]]\nname = 'x'\n", "model 1: give ckpt (a path or a list: an ensemble) or ct2 (a directory), one of them"),
    ("[[model]]\nckpt = 'none.pt'\n", "checkpoint not found: {dir}/none.pt"),
    ("[[model]]\nckpt = '{ckpt}'\nprecision = 'fp8'\n", "model 1: precision fp8 (one of fp32, bf16, int8)"),
    ("[[model\n", "Expected ']]' at the end of an array declaration (at line 1, column 8)"),
])
def test_a_bad_models_file_is_named(capsys, ckpts, tmp_path, text, error):
    path = tmp_path / "models.toml"
    path.write_text(text.format(ckpt=ckpts["en-de"]), encoding="utf-8")
    status, err = run(capsys, "--models", str(path), "--port", "0")
    assert status == 1 and err.startswith("mt-serve: error: ") and error.format(dir=tmp_path) in err, err


def test_models_and_ckpt_together_are_a_usage_error(capsys, ckpts, tmp_path):
    status, err = run(capsys, "--models", str(tmp_path / "m.toml"), "--ckpt", str(ckpts["en-de"]), "--port", "0")
    assert (status, err) == (2, "mt-serve: error: give --models or --ckpt/--ct2, not both")
    status, err = run(capsys, "--ckpt", str(ckpts["en-de"]), "--ckpt", str(ckpts["de-en"]), "--target-lang", "fr")
    assert status == 2 and "with several, give each its own in a --models file" in err


def write_models(path, entries: dict) -> None:
    path.write_text("".join(f'[[model]]\nname = "{name}"\nckpt = "{ckpt}"\n\n' for name, ckpt in entries.items()),
                    encoding="utf-8")


def test_sighup_rereads_the_models_file_without_dropping_requests(ckpts, tmp_path):
    """Requests stream in while SIGHUP swaps en-de for another checkpoint and adds de-en: every request is
    answered (by the old or the new en-de), and after the reload the new list is served."""
    models = tmp_path / "models.toml"
    write_models(models, {"en-de": ckpts["en-de"]})
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "mt.cli.serve", "--models", str(models), "--port", str(port), "--threads", "1",
               "--quick-start", "--log-level", "info"]
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    old = reference(torch_engine(ckpts["en-de"]), LINES)
    new = reference(torch_engine(ckpts["en-de-new"]), LINES)
    assert old != new
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)

    async def stream(client: httpx.AsyncClient, stop: asyncio.Event) -> list[list[str]]:
        answers = []
        while not stop.is_set():
            answer = await client.post(f"{url}/translate", json={"q": LINES, "source": "en", "target": "de"})
            assert answer.status_code == 200, answer.text
            answers.append(answer.json()["translatedText"])
        return answers

    async def scenario() -> list[list[str]]:
        stop = asyncio.Event()
        async with httpx.AsyncClient(timeout=WAIT_S) as client:
            streams = [asyncio.create_task(stream(client, stop)) for _ in range(4)]
            await asyncio.sleep(0.5)
            write_models(models, {"en-de": ckpts["en-de-new"], "de-en": ckpts["de-en"]})
            process.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + WAIT_S
            while "de" not in [lang["code"] for lang in (await client.get(f"{url}/languages")).json()
                               if lang["targets"]]:
                assert time.monotonic() < deadline, "the reload did not happen"
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.5)
            stop.set()
            return [a for found in await asyncio.gather(*streams) for a in found]

    try:
        wait_healthy(url, timeout=WAIT_S)
        answers = asyncio.run(scenario())
        assert all(a in (old, new) for a in answers) and answers[0] == old and answers[-1] == new
        after = httpx.post(f"{url}/translate", json={"q": LINES, "source": "en", "target": "de"}).json()
        assert after["translatedText"] == new
        assert [m["name"] for m in httpx.get(f"{url}/v1/models").json()] == ["en-de", "de-en"]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=WAIT_S) == 0
        assert "reloaded" in process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
