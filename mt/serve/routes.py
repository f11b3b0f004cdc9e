"""The HTTP routes: LibreTranslate's /translate, /languages and /frontend/settings, mt's /v1/translate, /health,
/metrics, the page (the file routes: ``file_routes``)."""

from __future__ import annotations

import time
from importlib.resources import files
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import ValidationError

from mt.document.errors import DocumentError
from mt.document.plain import text_document
from mt.serve.documents import Planned, plan
from mt.serve.engine import Engine, Options, Output
from mt.serve.front import ClientLeft, Front
from mt.serve.libretranslate import (
    check_languages,
    frontend_settings,
    languages,
    parse_text_request,
    read_json_object,
    read_params,
    text_items,
)
from mt.serve.limits import check_api_key, check_sentence_count, split_lines
from mt.serve.metrics import Metrics
from mt.serve.problems import bad_request
from mt.serve.schemas import (
    ErrorResponse,
    FrontendSettings,
    Health,
    Language,
    LibreTranslateForm,
    LibreTranslateRequest,
    LibreTranslateResponse,
    TranslateV1Request,
    TranslateV1Response,
)

CLIENT_CLOSED = 499  # nginx's code for a client that left before the answer; only the metrics see it
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse, "description": what}
    for code, what in {
        400: "invalid request", 403: "invalid API key", 413: "body too large", 429: "queue full (see Retry-After)",
        500: "translation failed", 503: "warming up", 504: "timed out",
    }.items()
}

router = APIRouter()


def front(request: Request) -> Front:
    return request.app.state.front


def body_schema(model: type, form: type | None = None) -> dict[str, Any]:
    """``openapi_extra`` for a route that reads its body itself (so every parse error is ours, a 400)."""
    content = {"application/json": {"schema": model.model_json_schema()}}
    if form is not None:
        content["application/x-www-form-urlencoded"] = {"schema": form.model_json_schema()}
    return {"requestBody": {"required": True, "content": content}}


@router.post(
    "/translate",
    response_model=LibreTranslateResponse,
    response_model_exclude_none=True,
    responses=ERRORS,
    openapi_extra=body_schema(LibreTranslateRequest, LibreTranslateForm),
    summary="Translate text (LibreTranslate-compatible)",
)
async def translate(request: Request) -> Any:
    service = front(request)
    params = await read_params(request)
    check_api_key(params.get("api_key"), service.settings.api_keys)
    text = parse_text_request(params, service.settings.max_beam - 1, default_source="auto")
    engine = service.engine
    tag = check_languages(text.source, text.target, engine.source_lang, engine.target_langs, engine.tagged)
    planned = plan_request(service, text.texts, text.format, text.source, tag)
    options = alternatives_options(engine, text.alternatives) if text.alternatives else Options()
    try:
        outputs = await service.translate(request, planned.sentences, options, tag, planned.needs_alignment)
    except ClientLeft:
        return Response(status_code=CLIENT_CLOSED)
    best = planned.finish(outputs)
    answer: dict[str, Any] = {"translatedText": text.shape([b.decode("utf-8") for b in best])}
    if text.source == "auto":
        detected = {"confidence": 100.0, "language": service.engine.source_lang}  # one source language
        answer["detectedLanguage"] = [detected] * len(text.texts) if text.is_list else detected
    if text.alternatives:
        found = planned.alternatives(outputs, text.alternatives, best) if text.format == "text" else [[]] * len(best)
        answer["alternatives"] = text.shape([[b.decode("utf-8") for b in alts] for alts in found])
    return answer


def plan_request(service: Front, texts: list[str], text_format: str, source: str, tag: str | None) -> Planned:
    """The request's texts as documents cut into sentences (400 for more than ``--max-lines`` sentences)."""
    if text_format == "html":
        from mt.document.formats.html import read_fragment

        try:
            documents = [read_fragment(text) for text in texts]
        except DocumentError as e:
            raise bad_request(f"Invalid request: {e}") from None
    else:
        documents = [text_document(text) for text in texts]
    language = service.engine.source_lang if source == "auto" else source
    planned = plan(documents, language, service.engine, tag)
    check_sentence_count(len(planned.sentences), service.settings.max_lines)
    return planned


def alternatives_options(engine: Engine, count: int) -> Options:
    """Beam search wide enough for ``count`` alternatives beside the best (the server's beam, or wider)."""
    cfg = engine.settings(Options())
    return Options(strategy="beam", beam=max(cfg.beam_size if cfg.strategy == "beam" else 1, count + 1),
                   nbest=count + 1)


def v1_request(body: dict[str, Any]) -> TranslateV1Request:
    try:
        return TranslateV1Request.model_validate(body)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise bad_request(f"Invalid request: {where}: {first['msg']}") from None


def document_outputs(planned: Planned, outputs: list[Output], nbest: int) -> list[Output]:
    """One output per text of the request: its best translation and ``nbest - 1`` alternatives (each
    sentence's k-th hypothesis), scored by the sum of its sentences' scores."""
    written = planned.finish(outputs)
    best = [b.decode("utf-8") for b in written]
    others = planned.alternatives(outputs, nbest - 1, written) if nbest > 1 else [[] for _ in best]
    out, at = [], 0
    for text, alternatives, part in zip(best, others, planned.plans, strict=True):
        sentences = outputs[at : at + len(part.sentences)]
        at += len(part.sentences)
        texts = [text, *(b.decode("utf-8") for b in alternatives)]
        scores = [sum(o.scores[min(k, len(o.scores) - 1)] for o in sentences if o.scores) for k in range(len(texts))]
        out.append(Output(texts, scores, sum(o.src_tokens for o in sentences), sum(o.tgt_tokens for o in sentences)))
    return out


def line_translation(output: Output, nbest: int, scores: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {"text": output.text}
    if scores and output.scores:
        entry["score"] = output.scores[0]
    if nbest > 1:
        entry["nbest"] = [
            {"text": text, **({"score": score} if scores else {})}
            for text, score in zip(output.texts, output.scores, strict=True)
        ]
    return entry


@router.post(
    "/v1/translate",
    response_model=TranslateV1Response,
    response_model_exclude_none=True,
    responses=ERRORS,
    openapi_extra=body_schema(TranslateV1Request),
    summary="Translate lines with decoding options, n-best and scores",
)
async def translate_v1(request: Request) -> Any:
    start = time.monotonic()
    service = front(request)
    body = await read_json_object(request)
    check_api_key(body.get("api_key"), service.settings.api_keys)
    req = v1_request(body)
    texts, _ = text_items(req.q)
    engine = service.engine
    tag = check_languages(req.source, req.target or None, engine.source_lang, engine.target_langs, engine.tagged)
    if req.split_sentences:
        planned = plan_request(service, texts, req.format, req.source, tag)
        lines = planned.sentences
    else:
        lines = [line for text in texts for line in split_lines(text)]
        check_sentence_count(len(lines), service.settings.max_lines)
    options = Options(req.strategy, req.beam, req.nbest, req.alpha)
    try:
        outputs = await service.translate(request, lines, options, tag,
                                          planned.needs_alignment if req.split_sentences else None)
    except ClientLeft:
        return Response(status_code=CLIENT_CLOSED)
    cfg = engine.settings(options)
    nbest = cfg.nbest if cfg.strategy == "beam" else 1
    settings = {"strategy": cfg.strategy, "beam": cfg.beam_size, "nbest": nbest, "alpha": cfg.alpha,
                "length_penalty": cfg.length_penalty}
    if req.split_sentences:
        outputs = document_outputs(planned, outputs, nbest)
    return {
        "translations": [line_translation(o, nbest, req.scores) for o in outputs],
        "settings": settings,
        "time_ms": round((time.monotonic() - start) * 1000, 3),
    }


@router.get("/languages", response_model=list[Language], summary="Languages (LibreTranslate-compatible)")
async def get_languages(request: Request) -> Any:
    engine = front(request).engine
    return languages(engine.source_lang, engine.target_langs)


@router.get("/frontend/settings", response_model=FrontendSettings,
            summary="The server's settings for a page (LibreTranslate-compatible)")
async def get_frontend_settings(request: Request) -> Any:
    from mt.document.formats import extensions

    service = front(request)
    engine = service.engine
    return frontend_settings(engine.source_lang, engine.target_langs, service.settings, extensions())


@router.get("/health", response_model=Health, responses={503: {"model": Health}, 500: {"model": ErrorResponse}},
            summary="200 once the model is loaded and a warm-up translation ran")
async def health(request: Request) -> Any:
    worker = front(request).worker
    if worker.warmup_error is not None:
        return JSONResponse({"error": f"warm-up failed: {worker.warmup_error}"}, status_code=500)
    if not worker.ready.is_set():
        return JSONResponse({"status": "warming up"}, status_code=503)
    return {"status": "ok"}


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    registry: Metrics = request.app.state.metrics
    return Response(registry.render(), media_type=registry.content_type)


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def page() -> HTMLResponse:
    return HTMLResponse(files("mt.serve").joinpath("page.html").read_text(encoding="utf-8"))
