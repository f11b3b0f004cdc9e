"""``mt-serve`` / ``python -m mt.cli.serve``: translate over HTTP with trained checkpoints or CTranslate2 exports.

Examples:
    mt-serve --ckpt runs/demo/checkpoints/best.pt                  # http://127.0.0.1:5000/
    mt-serve --ct2 exports/demo-ct2 --port 8000 --api-keys keys.txt
    mt-serve --ckpt en-de.pt --ckpt de-en.pt                       # two models: en <-> de
    mt-serve --models models.toml --lazy --max-loaded 4            # a list; SIGHUP re-reads it
    curl -s localhost:5000/translate -H 'Content-Type: application/json' \\
        -d '{"q": "twenty-one", "source": "en", "target": "de"}'

LibreTranslate's ``POST /translate``, ``POST /translate_file``, ``GET /languages`` and ``GET
/frontend/settings``, mt's ``POST /v1/translate`` (beam, nbest, alpha, strategy, scores), ``GET /health``,
``GET /metrics`` (Prometheus), ``/docs`` (OpenAPI) and a page at ``/`` (text, html or a file). Lines of
concurrent requests are decoded together (``--max-batch-tokens``, ``--max-wait-ms``); each answer equals
mt-translate's for the same lines and settings. A model of several target languages
serves them all: a request's ``target`` picks one (``/languages`` lists them), as ``mt-translate
--target-lang`` does, and lines for different targets share a batch. Several models: each ``--ckpt``
or ``--ct2`` is another (``--ckpt A B``: one ensemble); a pair goes to the first model that translates
it, else through one pivot language; ``source=auto`` and ``POST /detect`` tell the language; each model
has its own queue, served in turn. SIGTERM stops taking requests, answers those already taken, then exits 0.

Files: ``curl -F file=@report.docx -F target=de localhost:5000/translate_file`` answers
``{"translatedFileUrl": "http://.../download_file/<token>/report.de.docx"}`` (the formats:
``/frontend/settings``' ``supportedFilesFormat``); the URL downloads the translation for ``--file-ttl``
seconds. Files are bounded by ``--max-file-bytes`` and ``--max-file-sentences`` (not ``--max-lines``);
translated files wait in a private temporary directory, removed at exit, at most ``--max-stored-bytes``
in all (the oldest go first).
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from mt.cli.errors import UsageError, run_command
from mt.cli.flags import AppendModel, add_decode_args, add_model_args, add_version_flag, ranged
from mt.cli.serve_models import model_specs, read_models_file
from mt.errors import UserError
from mt.serve.settings import ServeSettings

DEFAULTS = ServeSettings()


def add_serve_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("serving")
    g.add_argument("--ct2", type=Path, metavar="DIR", action=AppendModel,
                   help="a model to serve: an mt-export CTranslate2 directory (repeatable, beside --ckpt)")
    g.add_argument("--models", type=Path, metavar="FILE",
                   help="the models to serve, from a TOML file of [[model]] entries (name, ckpt or ct2, precision, "
                        "source_lang, target_lang; README); SIGHUP re-reads it")
    g.add_argument("--lazy", action="store_true",
                   help="load each model on its first request, not at start")
    g.add_argument("--max-loaded", type=ranged(int, 1), metavar="N",
                   help="models kept loaded at once; loading another unloads the least recently used "
                        "(default: all)")
    g.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    g.add_argument("--port", type=ranged(int, 0, 65535), default=5000, help="(default: %(default)s; 0: any free)")
    g.add_argument("--max-batch-tokens", type=ranged(int, 1),
                   help="source tokens (x beam) the worker gathers from queued requests for one decoding call, "
                        "which sorts them by length into batches (default: 4 decoding batches, 4 x --max-tokens "
                        "or the checkpoint's)")
    g.add_argument("--max-wait-ms", type=ranged(float, 0), default=DEFAULTS.max_wait_ms,
                   help="how long the worker waits for more requests before decoding a partial batch "
                        "(default: %(default)s)")
    g.add_argument("--max-queue", type=ranged(int, 1), default=DEFAULTS.max_queue,
                   help="queued requests; more get 429 (default: %(default)s)")
    g.add_argument("--max-lines", type=ranged(int, 1), default=DEFAULTS.max_lines,
                   help="lines in one request (default: %(default)s)")
    g.add_argument("--max-body-bytes", type=ranged(int, 1), default=DEFAULTS.max_body_bytes,
                   help="request body size (default: %(default)s; /translate_file's: --max-file-bytes)")
    g.add_argument("--max-file-bytes", type=ranged(int, 1), default=DEFAULTS.max_file_bytes,
                   help="size of a file uploaded to /translate_file; a larger one gets 413 (default: %(default)s; "
                        "the upload's body may hold this plus 64 KiB of form fields, whatever --max-body-bytes)")
    g.add_argument("--max-file-sentences", type=ranged(int, 1), default=DEFAULTS.max_file_sentences,
                   help="sentences in one uploaded file; more get 400 (default: %(default)s; --max-lines does not "
                        "apply to files)")
    g.add_argument("--file-ttl", type=ranged(float, 0, low_open=True), default=DEFAULTS.file_ttl_s,
                   help="seconds a translated file stays downloadable before it is removed (default: %(default)s)")
    g.add_argument("--max-stored-bytes", type=ranged(int, 1), default=DEFAULTS.max_stored_bytes,
                   help="translated files kept at once, in bytes; past it the oldest are removed first "
                        "(default: %(default)s)")
    g.add_argument("--max-beam", type=ranged(int, 1), default=DEFAULTS.max_beam,
                   help="largest beam a request may ask for (default: %(default)s)")
    g.add_argument("--timeout", type=ranged(float, 0, low_open=True), default=DEFAULTS.timeout_s,
                   help="seconds before an unanswered request gets 504 (default: %(default)s)")
    g.add_argument("--quick-start", action="store_true",
                   help="warm up with one line only, not also a full batch at the length limit: ready sooner, "
                        "but memory then grows with the first minutes of traffic")
    g.add_argument("--api-keys", type=Path, metavar="FILE", help="one key a line; requests need one (403 without)")
    g.add_argument("--source-lang", help="source language code (default: the checkpoint's; en for --ct2)")
    g.add_argument("--target-lang", help="target language code (default: the checkpoint's; de for --ct2); a model "
                                          "of several target languages serves them all")
    g.add_argument("--log-level", choices=("critical", "error", "warning", "info", "debug"), default="info")


def settings_from(args: argparse.Namespace):
    from mt.serve.limits import load_api_keys

    return ServeSettings(
        max_batch_tokens=args.max_batch_tokens, max_wait_ms=args.max_wait_ms, max_queue=args.max_queue,
        max_lines=args.max_lines, max_body_bytes=args.max_body_bytes, max_beam=args.max_beam,
        max_file_bytes=args.max_file_bytes, max_file_sentences=args.max_file_sentences, file_ttl_s=args.file_ttl,
        max_stored_bytes=args.max_stored_bytes,
        timeout_s=args.timeout, api_keys=load_api_keys(args.api_keys) if args.api_keys else frozenset(),
        fill=not args.quick_start, threads=args.threads,
    )


def load_engine(args: argparse.Namespace):
    """The engine of the first model the flags name (``--ckpt`` or ``--ct2``), loaded on this thread."""
    return model_specs(args)[0].load()


def load_models(args: argparse.Namespace):
    """The served models (``model_specs``): checked now, and (without ``--lazy``) the first ``--max-loaded``
    loaded on this thread, so a model that cannot load fails the command before it serves."""
    from mt.serve.models import ModelSet, ServedModel

    models = ModelSet([ServedModel(spec) for spec in model_specs(args)], args.max_loaded)
    if not args.lazy:
        for model in models.loaded_at_start():
            model.load()
    return models


def served_languages(cfg, args: argparse.Namespace) -> tuple[str, list[str], bool]:
    """(source language, target languages, tagged) of a checkpoint: a model of several targets serves them
    all (``--target-lang`` must be one of them); a one-pair model its pair, renamed by the flags if given."""
    from mt.data.languages import check_target, is_multilingual, source_languages, target_languages

    source = args.source_lang or source_languages(cfg.data)[0]
    if is_multilingual(cfg.data):
        if args.target_lang is not None:
            check_target(cfg.data, args.target_lang)
        return source, target_languages(cfg.data), True
    return source, [args.target_lang or target_languages(cfg.data)[0]], False


def bind(host: str, port: int) -> socket.socket:
    """The listening address, taken before the model loads: a port in use fails at once, naming the flag."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise UsageError(f"--host {host}: {e.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {e.strerror} (--host/--port)") from None
    return sock


def need_serve_extra() -> None:
    try:
        import fastapi  # noqa: F401
        import prometheus_client  # noqa: F401
        import python_multipart  # noqa: F401  (Starlette parses /translate_file's uploads with it)
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise UserError(f"mt-serve needs the serve extra (pip install -e '.[serve]'): {e}") from None


def serve(args: argparse.Namespace) -> None:
    need_serve_extra()
    import uvicorn

    from mt.serve.app import create_app

    settings = settings_from(args)
    sock = bind(args.host, args.port)
    models = load_models(args)
    warnings.filterwarnings("ignore", message=r"line \d+: \d+ source pieces")  # truncation: the documented policy
    for model in models.models:
        state = model.engine.description if model.engine is not None else f"{model.spec.what} (loads on first use)"
        print(f"mt-serve: {model.name}: {state}", file=sys.stderr)
    port = sock.getsockname()[1]  # --port 0: the one the OS picked
    print(f"mt-serve: http://{args.host}:{port}/ ({models.router.describe()})", file=sys.stderr, flush=True)
    show_server_log(args.log_level)
    app = create_app(models, settings)
    # uvicorn re-raises the SIGTERM it handled once its graceful shutdown is over; a handler that ignores
    # it lets the command return, so the drained server exits 0
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    if args.models is not None:
        signal.signal(signal.SIGHUP, lambda signum, frame: start_reload(app, args))
    config = uvicorn.Config(app, log_level=args.log_level, access_log=False)  # no access log: keys in URLs stay out
    uvicorn.Server(config).run(sockets=[sock])


def start_reload(app, args: argparse.Namespace) -> None:
    """SIGHUP: re-read ``--models`` in a thread of its own; the server answers meanwhile (``Front.reload``)."""
    import threading

    threading.Thread(target=reload_models, args=(app, args), name="mt-serve-reload", daemon=True).start()


def reload_models(app, args: argparse.Namespace) -> None:
    log = logging.getLogger("mt.serve")
    try:
        models = app.state.front.reload(read_models_file(args.models, args), lazy=args.lazy)
    except Exception as e:  # noqa: BLE001  (a bad file or model leaves the old list serving)
        log.error("reload of %s failed, still serving the old list: %s", args.models, e)
        return
    log.info("reloaded %s (%s)", args.models, models.router.describe())


def show_server_log(level: str) -> None:
    """``mt.serve``'s log (the warm-up's time, unexpected errors) on stderr as ``mt-serve: ...`` lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("mt-serve: %(message)s"))
    logger = logging.getLogger("mt.serve")
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    logger.propagate = False


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mt-serve", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    add_version_flag(parser)
    add_model_args(parser, repeated=True)
    add_serve_args(parser)
    add_decode_args(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return run_command("mt-serve", lambda: serve(args), args.debug)


if __name__ == "__main__":
    sys.exit(main())
