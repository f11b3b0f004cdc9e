"""``mt-serve`` as a process: SIGTERM answers every request already accepted, refuses new ones, exits 0."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
from export_helpers import demo_sources, untrained_checkpoint
from serve_helpers import wait_healthy

REQUESTS, LINES = 5, 8  # demo_sources has 40 lines
WAIT_S = 60


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path):
    ckpt = untrained_checkpoint(tmp_path / "untrained.pt")
    port = free_port()
    # one request per batch (--max-batch-tokens 1) and long untrained outputs: requests are still queued at SIGTERM
    command = [sys.executable, "-m", "mt.cli.serve", "--ckpt", str(ckpt), "--port", str(port), "--threads", "1",
               "--max-batch-tokens", "1", "--log-level", "warning"]
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", timeout=WAIT_S)
        yield process, f"http://127.0.0.1:{port}"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def accepted(url: str) -> int:
    text = httpx.get(f"{url}/metrics").text
    return int(float(re.search(r"^mt_queue_depth_count (\S+)$", text, re.MULTILINE).group(1)))


def test_sigterm_answers_accepted_requests_then_exits_0(server):
    process, url = server
    lines = demo_sources(REQUESTS * LINES)
    bodies = [{"q": lines[i * LINES : (i + 1) * LINES], "target": "de"} for i in range(REQUESTS)]

    async def scenario():
        async with httpx.AsyncClient(timeout=WAIT_S) as client:
            tasks = [asyncio.create_task(client.post(f"{url}/translate", json=b)) for b in bodies]
            deadline = time.monotonic() + WAIT_S
            while await asyncio.to_thread(accepted, url) < REQUESTS:
                assert time.monotonic() < deadline, "the requests were not all accepted"
                await asyncio.sleep(0.02)
            pending = sum(not t.done() for t in tasks)
            process.send_signal(signal.SIGTERM)
            return pending, await asyncio.gather(*tasks)

    pending, answers = asyncio.run(scenario())
    assert pending > 0  # else the test would prove nothing
    assert [a.status_code for a in answers] == [200] * REQUESTS
    assert all(len(a.json()["translatedText"]) == LINES for a in answers)
    assert process.wait(timeout=WAIT_S) == 0, process.stderr.read()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/health")


@pytest.mark.parametrize("quick", [False, True])
def test_the_batch_warm_up_is_reported_and_quick_start_skips_it(tmp_path, quick):
    ckpt = untrained_checkpoint(tmp_path / "untrained.pt")
    port = free_port()
    command = [sys.executable, "-m", "mt.cli.serve", "--ckpt", str(ckpt), "--port", str(port), "--threads", "1",
               "--log-level", "info", *(["--quick-start"] if quick else [])]
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", timeout=WAIT_S)
        process.send_signal(signal.SIGTERM)
        err = process.communicate(timeout=WAIT_S)[1]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    reported = re.search(r"^mt-serve: warm-up: \d+ lines at the length limit in \d+\.\d s$", err, re.MULTILINE)
    assert process.returncode == 0 and (reported is None) == quick, err
