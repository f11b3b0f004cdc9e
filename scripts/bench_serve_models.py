"""``make bench-serve-models``: two models behind one mt-serve under a mixed load, and the memory of N models.

    python scripts/bench_serve_models.py [--ckpt A.pt] [--ckpt-b B.pt] [--seconds 30] [--rounds 2]
    python scripts/bench_serve_models.py --smoke --ckpt X --source-file F   # seconds: what the test suite runs

One server holds two models (``--ckpt A --ckpt B``; without ``--ckpt-b`` the same checkpoint twice, named
``en-de`` and ``en-de-2``: the same work for each, so any difference is the scheduler's). Requests of 1-8
test2016 lines go to a model by name (``/v1/translate`` with ``model``, in its first pair), each answer
checked against that model's offline translation. Per round, each run ``--seconds`` long with clients
sending again and again: model A alone (``--clients / 2`` clients), model B alone (the same), then both at
once (``--clients / 2`` each). Printed per model: sentences/s and p95 latency alone and mixed (medians
over ``--rounds``). Then the resident memory of servers holding 1..``--max-models`` copies of A (RSS
after the warm-up) and what each model's load added (``/v1/models``' ``resident_bytes``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path

import httpx
from bench_serve import (
    DEFAULT_DATA,
    Ask,
    Server,
    default_checkpoint,
    load,
    make_requests,
    offline,
    percentile,
    read_lines,
)

SMOKE = {"seconds": 1.0, "rounds": 1, "clients": 4, "max_models": 1, "requests": 16, "server_args": ["--quick-start"]}


def model_asks(requests: list[list[str]], expected: dict[str, str], model: dict) -> list[Ask]:
    """Requests for ``model`` (an entry of /v1/models) by name, in its first pair."""
    source, target = model["pairs"][0].split("-")
    return [Ask({"q": lines, "source": source, "target": target, "model": model["name"], "split_sentences": False},
                len(lines), [expected[line] for line in lines], path="/v1/translate", label=model["name"])
            for lines in requests]


def figures(latencies, errors, exact, sentences, seconds) -> dict:
    return {"sentences_per_s": sentences / seconds, "p95_ms": percentile(latencies, 0.95), "requests": len(latencies),
            "errors": errors, "exact": exact}


async def mixed(url: str, asks: dict[str, list[Ask]], clients: int, seconds: float, names: list[str]) -> dict:
    """``names`` loaded at once, ``clients`` each, for ``seconds``: figures per model."""
    found = await asyncio.gather(*(load(url, asks[n], clients, seconds, repeat=True) for n in names))
    return {name: figures(*f) for name, f in zip(names, found, strict=True)}


def show(kind: str, name: str, f: dict) -> None:
    print(f"  {kind:>6} {name:>8}: {f['sentences_per_s']:7.1f} sent/s  p95 {f['p95_ms']:7.1f} ms  "
          f"errors {f['errors']}  exact {f['exact']}  ({f['requests']} requests)", flush=True)


def mixed_load(args, ckpts: list[Path], requests, expected: list[dict[str, str]]) -> dict:
    half = max(1, args.clients // 2)
    runs: list[dict] = []
    with Server(ckpts, args.threads, args.server_args) as server:
        models = httpx.get(f"{server.url}/v1/models", timeout=30).json()
        names = [m["name"] for m in models]
        asks = {m["name"]: model_asks(requests, found, m) for m, found in zip(models, expected, strict=True)}
        for round_ in range(1, args.rounds + 1):
            print(f"round {round_}/{args.rounds}: {half} clients a model", flush=True)
            for name in names:
                alone = asyncio.run(mixed(server.url, asks, half, args.seconds, [name]))[name]
                show("alone", name, alone)
                runs.append({"round": round_, "load": "alone", "model": name, **alone})
            both = asyncio.run(mixed(server.url, asks, half, args.seconds, names))
            for name in names:
                show("mixed", name, both[name])
                runs.append({"round": round_, "load": "mixed", "model": name, **both[name]})
    summary = {}
    for name in names:
        for kind in ("alone", "mixed"):
            rows = [r for r in runs if r["model"] == name and r["load"] == kind]
            summary[f"{name} {kind}"] = {key: statistics.median(r[key] for r in rows)
                                         for key in ("sentences_per_s", "p95_ms")}
    print(f"\nmedians over {args.rounds} round(s), {half} clients a model:")
    for key, value in summary.items():
        print(f"  {key:>16}: {value['sentences_per_s']:7.1f} sent/s  p95 {value['p95_ms']:7.1f} ms")
    return {"runs": runs, "medians": summary}


def memory(args, ckpt: Path) -> list[dict]:
    """RSS of servers holding 1..max_models copies of ``ckpt``, and each load's resident bytes."""
    rows = []
    for count in range(1, args.max_models + 1):
        with Server([ckpt] * count, args.threads, args.server_args) as server:
            models = httpx.get(f"{server.url}/v1/models", timeout=30).json()
            row = {"models": count, "rss_mib": server.rss_mib(),
                   "loads_mib": [m["resident_bytes"] / 2**20 for m in models]}
        print(f"  {count} model(s): RSS {row['rss_mib']:.0f} MiB; each load added "
              f"{', '.join(f'{x:.0f}' for x in row['loads_mib'])} MiB", flush=True)
        rows.append(row)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ckpt", type=Path, help="model A (default: make bench's Multi30k checkpoint)")
    p.add_argument("--ckpt-b", type=Path, help="model B (default: A again, as a second model)")
    p.add_argument("--source-file", type=Path, default=DEFAULT_DATA, help="source lines (plain or .gz)")
    p.add_argument("--requests", type=int, default=400, help="distinct requests (1-8 lines each), sent in a loop")
    p.add_argument("--seconds", type=float, default=30.0, help="length of each run")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--clients", type=int, default=64, help="clients in the mixed run (half per model)")
    p.add_argument("--max-models", type=int, default=4, help="memory: servers of 1..N models")
    p.add_argument("--threads", type=int, default=0, help="decoding threads (0: the server's default)")
    p.add_argument("--server-args", nargs="+", default=[], metavar="ARG", help="more mt-serve flags")
    p.add_argument("--smoke", action="store_true",
                   help="a few seconds' run with tiny counts and --quick-start servers (the test suite's)")
    p.add_argument("--json-out", type=Path)
    args = p.parse_args()
    if args.smoke:
        for key, value in SMOKE.items():
            setattr(args, key, value)
    a = args.ckpt if args.ckpt is not None else default_checkpoint()
    b = args.ckpt_b or a
    requests = make_requests(read_lines(args.source_file), args.requests, seed=0)
    lines = [line for r in requests for line in r]
    expected_a = offline(a, lines, args.threads)[0]
    expected = [expected_a, expected_a if b == a else offline(b, lines, args.threads)[0]]
    report = {"mixed": mixed_load(args, [a, b], requests, expected)}
    print("\nresident memory:")
    report["memory"] = memory(args, a)
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(report, indent=2))
    bad = [r for r in report["mixed"]["runs"] if r["errors"] or not r["exact"]]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
