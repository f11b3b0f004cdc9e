"""The README's screenshot of mt-serve's page: a paragraph translated by a served checkpoint.

    python scripts/screenshot_page.py --ckpt runs/multi30k_en_de/checkpoints/best.pt [--out docs/img/serve_page.png]

Starts ``mt-serve`` on a free loopback port, opens its page in Debian's chromium (Playwright driving it,
``apt-get install chromium``), types ``--text``, clicks Translate, waits for the answer and saves a PNG.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

TEXT = ("A man in a blue shirt is riding a bike down a hill. Two dogs are playing in the snow.\n\n"
        "A woman in a red dress is singing on a stage.")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ckpt", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=Path("docs/img/serve_page.png"))
    parser.add_argument("--text", default=TEXT)
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("no chromium (apt-get install chromium)")
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "mt.cli.serve", "--ckpt", str(args.ckpt), "--port", str(port),
                               "--quick-start", "--log-level", "warning"])
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                sys.exit("mt-serve did not become healthy")
            time.sleep(0.5)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1100, "height": 560})
            page.goto(url)
            page.fill("#input", args.text)
            page.click("#translate")
            page.wait_for_function("document.querySelector('#output').value.length > 0", timeout=120_000)
            page.screenshot(path=str(args.out), full_page=True)
            print(f"{args.out}: {page.input_value('#output')!r}")
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
