"""``make bench-serve``: mt-serve under load on loopback, against itself without batching and against mt-translate.

    python scripts/bench_serve.py [--ckpt PATH] [--requests 1200] [--time-limit 60] [--rounds 2]
    python scripts/bench_serve.py --soak-minutes 10            # then 8 clients for 10 minutes: RSS and errors
    python scripts/bench_serve.py --soak-only --soak-minutes 10   # the soak alone
    python scripts/bench_serve.py --smoke --ckpt X --source-file F   # seconds: what the test suite runs
    python scripts/bench_serve.py --documents-only --documents 200   # HTML documents against the same lines

Starts ``mt-serve`` (a subprocess on 127.0.0.1) with a trained Multi30k checkpoint (without ``--ckpt``,
``make bench``'s ``transformer_small``, trained once if missing) and sends test2016 lines, 1-8 lines a
request (seeded), from 1, 8 and 64 concurrent clients; each run is bounded by ``--requests`` and
``--time-limit``. For each it prints sentences/s, requests/s, p50/p95/p99 latency, errors and whether
every answer equals the offline translation (``Translator.translate`` over the same lines with the same
settings, i.e. mt-translate's output). Two comparisons, alternated over ``--rounds``: dynamic batching
against ``--max-batch-tokens 1`` (one request per batch) at 64 clients (goal >= 3x sentences/s), and
the server at 64 clients against offline decoding of the same lines (goal >= 80% of its sentences/s).
With ``--documents N``: N HTML documents of 5-20 sentences with inline tags (``format=html``: split,
aligned, tags projected) against the same sentences sent as plain lines, alternated on one server (goal:
documents >= 90% of the lines' sentences/s).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import html
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "multi30k" / "test_2016_flickr.en.gz"
START_TIMEOUT_S = 300
RSS_EVERY_S = 30
SMOKE = {"requests": 12, "time_limit": 30.0, "rounds": 1, "clients": [1, 4], "batched_clients": 4, "documents": 3}


@dataclass
class RunResult:
    server: str  # dynamic | one-at-a-time
    clients: int
    requests: int
    sentences: int
    seconds: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    errors: int
    exact: bool

    @property
    def sentences_per_s(self) -> float:
        return self.sentences / self.seconds

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.seconds


def read_lines(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def make_requests(lines: list[str], count: int, seed: int) -> list[list[str]]:
    """``count`` requests of 1-8 consecutive lines, cycling through ``lines``."""
    rng, out, start = random.Random(seed), [], 0
    for _ in range(count):
        size = rng.randint(1, 8)
        out.append([lines[(start + i) % len(lines)] for i in range(size)])
        start += size
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``mt-serve`` in a subprocess on a free loopback port (a list of checkpoints: one model each); SIGTERM
    at exit (it drains, then exits 0)."""

    def __init__(self, ckpt: Path | list[Path], threads: int, extra: list[str]) -> None:
        self.port = free_port()
        models = [arg for path in (ckpt if isinstance(ckpt, list) else [ckpt]) for arg in ("--ckpt", str(path))]
        command = [sys.executable, "-m", "mt.cli.serve", *models, "--port", str(self.port),
                   "--threads", str(threads), "--log-level", "warning", "--max-queue", "1024", *extra]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.log = tempfile.TemporaryFile(mode="w+")  # shown only if the server fails
        self.process = subprocess.Popen(command, env=env, cwd=REPO, stderr=self.log)
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Server:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mt-serve exited with {self.process.returncode}: {self.output()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=5).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise TimeoutError("mt-serve did not become healthy")

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def __exit__(self, *exc) -> None:
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=START_TIMEOUT_S)
        if code != 0:
            raise RuntimeError(f"mt-serve exited with {code} after SIGTERM: {self.output()}")
        self.log.close()


class Connection:
    """One keep-alive HTTP/1.1 connection that POSTs JSON: the load generator's client.

    Lean on purpose: the clients share the server's two cores, and httpx's ``AsyncClient`` spent about
    4 ms of CPU a request here, which the decoder's threads then lose; this spends a small fraction of that.
    It speaks only what uvicorn answers to a POST: a status line, headers, a Content-Length body."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post_json(self, path: str, payload) -> tuple[int, bytes]:
        """(status, body) of ``POST path`` with ``payload`` as JSON; reconnects after a closed connection."""
        body = json.dumps(payload).encode()
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(head + body)
        try:
            status = int((await self.reader.readline()).split()[1])
            length, close = 0, False
            while (line := await self.reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                length = int(value) if name == b"content-length" else length
                close |= name == b"connection" and value.strip().lower() == b"close"
            answer = await self.reader.readexactly(length)
        except (IndexError, ValueError, asyncio.IncompleteReadError) as e:
            await self.close()
            raise ConnectionError("the server closed the connection or answered something that is not HTTP/1.1") from e
        if close:
            await self.close()
        return status, answer

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.reader = self.writer = None


@dataclass(frozen=True)
class Ask:
    """One request: its /translate body, the sentences it holds, the answer it must get (None: not checked)."""

    payload: dict
    sentences: int
    expected: object = None
    path: str = "/translate"
    label: str = ""  # which series it counts in (bench_serve_models: the model)


def line_asks(requests: list[list[str]], expected: dict[str, str]) -> list[Ask]:
    """Requests of plain lines (a ``q`` list), each answer checked against the offline translations."""
    return [Ask({"q": lines, "source": "en", "target": "de"}, len(lines), [expected[line] for line in lines])
            for lines in requests]


async def load(url: str, asks: list[Ask], clients: int, time_limit: float, repeat: bool = False):
    """Send ``asks`` (again and again with ``repeat``) from ``clients`` concurrent clients, each on its
    own connection, until done or ``time_limit``: latencies, errors, exactness, sentences, seconds."""
    sent = 0
    latencies, errors, exact, sentences = [], 0, True, 0
    deadline = time.monotonic() + time_limit
    host, port = url.removeprefix("http://").rsplit(":", 1)

    async def client() -> None:
        nonlocal errors, exact, sentences, sent
        connection = Connection(host, int(port))
        while (repeat or sent < len(asks)) and time.monotonic() < deadline:
            ask = asks[sent % len(asks)]
            sent += 1
            start = time.monotonic()
            try:
                status, body = await asyncio.wait_for(connection.post_json(ask.path, ask.payload), time_limit + 60)
            except (TimeoutError, OSError):
                errors += 1
                await connection.close()
                continue
            latencies.append(time.monotonic() - start)
            if status != 200:
                errors += 1
                continue
            sentences += ask.sentences
            if ask.expected is not None:
                exact &= answer_text(json.loads(body)) == ask.expected
        await connection.close()

    start = time.monotonic()
    await asyncio.gather(*(client() for _ in range(clients)))
    seconds = time.monotonic() - start
    return latencies, errors, exact, sentences, seconds


def answer_text(answer: dict):
    """The translations of an answer: LibreTranslate's ``translatedText``, or /v1/translate's texts."""
    if "translatedText" in answer:
        return answer["translatedText"]
    return [t["text"] for t in answer["translations"]]


def run_load(server: Server, name: str, asks: list[Ask], clients: int, time_limit: float,
             repeat: bool = False) -> RunResult:
    latencies, errors, exact, sentences, seconds = asyncio.run(load(server.url, asks, clients, time_limit, repeat))
    result = RunResult(name, clients, len(latencies), sentences, seconds, percentile(latencies, 0.5),
                       percentile(latencies, 0.95), percentile(latencies, 0.99), errors, exact)
    print(f"  {name:>14} {clients:>3} clients: {result.sentences_per_s:7.1f} sent/s {result.requests_per_s:6.1f} req/s"
          f"  p50 {result.p50_ms:7.1f}  p95 {result.p95_ms:7.1f}  p99 {result.p99_ms:7.1f} ms  errors {errors}"
          f"  exact {exact}  ({len(latencies)} requests in {seconds:.1f} s)", flush=True)
    return result


def offline(ckpt: Path, lines: list[str], threads: int) -> tuple[dict[str, str], float]:
    """mt-translate's translations of ``lines`` (its loading and Translator, in a subprocess) and its sentences/s.

    ``lines`` are all the requests' lines in order (repeats included), so both sides decode the same work."""
    code = (
        "import json, sys, time\n"
        "from mt.cli.translate import load_translator, parse_args\n"
        f"args = parse_args(['--ckpt', {str(ckpt)!r}, '--threads', '{threads}'])\n"
        "translator, _, _ = load_translator(args)\n"
        "lines = json.load(sys.stdin)\n"
        "translator.translate(lines[:8])\n"  # warm-up, as the server's
        "start = time.monotonic(); out = translator.translate(lines); seconds = time.monotonic() - start\n"
        "json.dump({'out': out, 'seconds': seconds}, sys.stdout)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], input=json.dumps(lines), capture_output=True, text=True,
                          check=True, env=env, cwd=REPO)
    result = json.loads(done.stdout)
    print(f"  {'offline':>14}            : {len(lines) / result['seconds']:7.1f} sent/s  ({len(lines)} lines in "
          f"{result['seconds']:.1f} s)", flush=True)
    return dict(zip(lines, result["out"], strict=True)), len(lines) / result["seconds"]


def default_checkpoint() -> Path:
    sys.path.insert(0, str(REPO / "scripts"))
    from bench import train_decode_checkpoint

    return train_decode_checkpoint(str(DEFAULT_DATA.parent))


def soak(args, ckpt: Path, requests, expected) -> dict:
    """8 clients for ``--soak-minutes``: the server's RSS at start (after its warm-up), after the first minute
    and at the end, sampled every ``RSS_EVERY_S``, and the growth from start to end; errors, exactness."""
    with Server(ckpt, args.threads, args.server_args) as server:
        rss = [(0.0, server.rss_mib())]
        done = threading.Event()

        def sample() -> None:
            start = time.monotonic()
            while not done.wait(RSS_EVERY_S):
                rss.append((time.monotonic() - start, server.rss_mib()))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        result = run_load(server, "soak", line_asks(requests, expected), 8, args.soak_minutes * 60, repeat=True)
        done.set()
        sampler.join()
        rss.append((args.soak_minutes * 60, server.rss_mib()))
    after_minute = next((mib for seconds, mib in rss if seconds >= 60), rss[-1][1])
    growth = rss[-1][1] / rss[0][1] - 1
    print(f"soak: RSS {rss[0][1]:.0f} MiB at start, {after_minute:.0f} after a minute, {rss[-1][1]:.0f} at the end "
          f"({growth:+.1%}; max {max(mib for _, mib in rss):.0f}); errors {result.errors}; exact {result.exact}",
          flush=True)
    return {"rss_start_mib": rss[0][1], "rss_after_minute_mib": after_minute, "rss_end_mib": rss[-1][1],
            "rss_growth": growth, "rss_samples": rss, **asdict(result)}


def compare(args, ckpt: Path, requests, lines) -> tuple[dict, dict[str, str]]:
    """Alternated rounds: dynamic batching at every client count, one request per batch, offline.

    Returns the figures and the offline translations."""
    rows: list[RunResult] = []
    offline_rates = []
    expected: dict[str, str] = {}
    for round_ in range(1, args.rounds + 1):
        print(f"round {round_}/{args.rounds}", flush=True)
        expected, rate = offline(ckpt, lines, args.threads)
        offline_rates.append(rate)
        asks = line_asks(requests, expected)
        with Server(ckpt, args.threads, args.server_args) as server:
            rows += [run_load(server, "dynamic", asks, c, args.time_limit) for c in args.clients]
        with Server(ckpt, args.threads, ["--max-batch-tokens", "1"]) as server:
            rows.append(run_load(server, "one-at-a-time", asks, args.batched_clients, args.time_limit))

    def median_rate(name: str, clients: int) -> float:
        return statistics.median(r.sentences_per_s for r in rows if r.server == name and r.clients == clients)

    top = args.batched_clients
    dynamic, single, off = median_rate("dynamic", top), median_rate("one-at-a-time", top), statistics.median(
        offline_rates)
    errors, exact = sum(r.errors for r in rows), all(r.exact for r in rows)
    print(f"\nmedians over {args.rounds} round(s) at {top} clients: dynamic {dynamic:.1f} sent/s, one request per "
          f"batch {single:.1f} sent/s -> {dynamic / single:.2f}x (goal >= 3x); offline {off:.1f} sent/s -> "
          f"server {dynamic / off:.1%} of offline (goal >= 80%); errors {errors}; every answer exact: {exact}")
    return {"runs": [asdict(r) | {"sentences_per_s": r.sentences_per_s, "requests_per_s": r.requests_per_s}
                     for r in rows],
            "offline_sentences_per_s": offline_rates, "speedup_vs_one_at_a_time": dynamic / single,
            "fraction_of_offline": dynamic / off, "errors": errors, "exact": exact}, expected


TAGS = ("b", "em", "a")


def document_asks(lines: list[str], count: int, seed: int) -> tuple[list[Ask], list[Ask]]:
    """``count`` HTML documents of 5-20 sentences (paragraphs of 2-4, each with 1-2 inline tags around
    words, a link among them) and the same sentences as plain lines: what each way sends of the same text."""
    rng, html_asks, line_asks_, start = random.Random(seed), [], [], 0
    for _ in range(count):
        size = rng.randint(5, 20)
        sentences = [full_stop(lines[(start + i) % len(lines)]) for i in range(size)]
        start += size
        paragraphs, at = [], 0
        while at < size:
            group = sentences[at : at + rng.randint(2, 4)]
            at += len(group)
            paragraphs.append("<p>" + " ".join(with_tags(s, rng) for s in group) + "</p>")
        payload = {"q": "\n".join(paragraphs), "source": "en", "target": "de", "format": "html"}
        html_asks.append(Ask(payload, size))
        line_asks_.append(Ask({"q": sentences, "source": "en", "target": "de"}, size))
    return html_asks, line_asks_


def full_stop(sentence: str) -> str:
    return sentence if sentence.rstrip()[-1:] in ".!?" else sentence.rstrip() + "."


def with_tags(sentence: str, rng: random.Random) -> str:
    """``sentence`` with one or two inline tags around single words (escaped as HTML)."""
    words = [html.escape(w, quote=False) for w in sentence.split()]
    for k in rng.sample(range(len(words)), min(len(words), rng.randint(1, 2))):
        tag = rng.choice(TAGS)
        attrs = ' href="https://example.org/"' if tag == "a" else ""
        words[k] = f"<{tag}{attrs}>{words[k]}</{tag}>"
    return " ".join(words)


def compare_documents(args, ckpt: Path, lines: list[str]) -> dict:
    """Alternated rounds at ``--batched-clients``: HTML documents against the same sentences as plain lines
    (goal: documents >= 90% of the plain lines' sentences/s)."""
    html_asks, plain_asks = document_asks(lines, args.documents, seed=1)
    rows: list[RunResult] = []
    with Server(ckpt, args.threads, args.server_args) as server:
        for round_ in range(1, args.rounds + 1):
            print(f"documents, round {round_}/{args.rounds}", flush=True)
            rows.append(run_load(server, "plain lines", plain_asks, args.batched_clients, args.time_limit))
            rows.append(run_load(server, "html documents", html_asks, args.batched_clients, args.time_limit))
    plain = statistics.median(r.sentences_per_s for r in rows if r.server == "plain lines")
    documents = statistics.median(r.sentences_per_s for r in rows if r.server == "html documents")
    print(f"\nmedians over {args.rounds} round(s) at {args.batched_clients} clients: html documents {documents:.1f} "
          f"sent/s, the same sentences as plain lines {plain:.1f} sent/s -> {documents / plain:.1%} (goal >= 90%)")
    return {"runs": [asdict(r) | {"sentences_per_s": r.sentences_per_s} for r in rows],
            "documents_fraction_of_lines": documents / plain, "errors": sum(r.errors for r in rows)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ckpt", type=Path, help="trained Multi30k checkpoint (default: make bench's, trained if missing)")
    p.add_argument("--source-file", type=Path, default=DEFAULT_DATA, help="source lines (plain or .gz)")
    p.add_argument("--requests", type=int, default=1200,
                   help="requests per run at most (at 64 clients about 20 s: the first and last gathers, when fewer "
                        "than 64 requests are in flight, then weigh little)")
    p.add_argument("--time-limit", type=float, default=60.0, help="seconds per run at most")
    p.add_argument("--rounds", type=int, default=2, help="alternated rounds of the comparisons")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 8, 64])
    p.add_argument("--batched-clients", type=int, default=64, help="client count of the two comparisons")
    p.add_argument("--threads", type=int, default=0, help="decoding threads (0: each command's default)")
    p.add_argument("--server-args", nargs="+", default=[], metavar="ARG",
                   help="more mt-serve flags for the dynamic-batching server, e.g. --server-args=--max-wait-ms=2")
    p.add_argument("--soak-minutes", type=float, default=0.0, help="then a soak run at 8 clients this long")
    p.add_argument("--soak-only", action="store_true",
                   help="no comparisons: offline mt-translate (the answers to check against), then the soak")
    p.add_argument("--smoke", action="store_true", help="a few seconds' run with tiny counts (the test suite's)")
    p.add_argument("--documents", type=int, default=0,
                   help="then this many HTML documents of 5-20 sentences against the same sentences as lines")
    p.add_argument("--documents-only", action="store_true", help="no other comparison: the document load alone")
    p.add_argument("--json-out", type=Path, help="write the figures here")
    args = p.parse_args()
    if args.soak_only and args.soak_minutes <= 0:
        p.error("--soak-only needs --soak-minutes")
    if args.smoke:
        for key, value in SMOKE.items():
            setattr(args, key, value)
    ckpt = args.ckpt if args.ckpt is not None else default_checkpoint()
    requests = make_requests(read_lines(args.source_file), args.requests, seed=0)
    lines = [line for r in requests for line in r]  # offline decodes what the server gets, in one call
    if args.documents_only:
        report = {"documents": compare_documents(args, ckpt, read_lines(args.source_file))}
        if args.json_out is not None:
            args.json_out.write_text(json.dumps(report, indent=2))
        sys.exit(1 if report["documents"]["errors"] else 0)
    if args.soak_only:
        report, (expected, _) = {}, offline(ckpt, lines, args.threads)
    else:
        report, expected = compare(args, ckpt, requests, lines)
    if args.documents > 0 and not args.soak_only:
        report["documents"] = compare_documents(args, ckpt, read_lines(args.source_file))
    if args.soak_minutes > 0:
        report["soak"] = soak(args, ckpt, requests, expected)
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(report, indent=2))
    soaked = report.get("soak", {})
    if report.get("errors") or not report.get("exact", True) or soaked.get("errors") or not soaked.get("exact", True):
        sys.exit(1)


if __name__ == "__main__":
    main()
