"""The HTTP routes: LibreTranslate's /translate, /languages and /frontend/settings, mt's /v1/translate, /health,
/metrics, the page (the file routes: ``file_routes``)."""

from __future__ import annotations

import asyncio
import time
from importlib.resources import files
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import ValidationError

from mt.document.errors import DocumentError
from mt.document.formats import Document
from mt.document.plain import text_document
from mt.serve.documents import Planned
from mt.serve.engine import Options, Output
from mt.serve.front import ClientLeft, Front
from mt.serve.libretranslate import (
    frontend_settings,
    languages,
    parse_text_request,
    read_json_object,
    read_params,
    text_items,
)
from mt.serve.limits import check_api_key, check_sentence_count, split_lines
from mt.serve.metrics import Metrics
from mt.serve.models import ServedModel
from mt.serve.problems import bad_request
from mt.serve.schemas import (
    DetectedLanguage,
    DetectForm,
    DetectRequest,
    ErrorResponse,
    FrontendSettings,
    Health,
    Language,
    LibreTranslateForm,
    LibreTranslateRequest,
    LibreTranslateResponse,
    ModelInfo,
    TranslateV1Request,
    TranslateV1Response,
)
from mt.serve.translation import (
    DETECT_CHARS,
    Group,
    detect_sources,
    in_request_order,
    language_identifier,
    models_used,
    route_documents,
    routes,
    translate_groups,
    translate_lines,
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
    documents = read_documents(text.texts, text.format)
    detected = await detect_sources(service, documents) if text.source == "auto" else None
    sources = [lang for lang, _ in detected] if detected else [text.source] * len(documents)
    groups = await route_documents(service, documents, sources, text.target)
    options = await alternatives_options(service, groups, text.alternatives) if text.alternatives else Options()
    try:
        await translate_groups(service, request, groups, options)
    except ClientLeft:
        return Response(status_code=CLIENT_CLOSED)
    written = [g.planned.finish(g.outputs) for g in groups]
    best = in_request_order(groups, written)
    answer: dict[str, Any] = {"translatedText": text.shape([b.decode("utf-8") for b in best])}
    if detected is not None:
        found = [{"confidence": confidence, "language": lang} for lang, confidence in detected]
        answer["detectedLanguage"] = text.shape(found)
    if text.alternatives:
        if text.format == "text":
            alts = in_request_order(groups, [g.planned.alternatives(g.outputs, text.alternatives, w)
                                             for g, w in zip(groups, written, strict=True)])
        else:
            alts = [[]] * len(best)
        answer["alternatives"] = text.shape([[b.decode("utf-8") for b in found] for found in alts])
    return answer


def read_documents(texts: list[str], text_format: str) -> list[Document]:
    """The request's texts as documents (``format=html``: markup read by lxml; 400 when it cannot be)."""
    if text_format != "html":
        return [text_document(text) for text in texts]
    from mt.document.formats.html import read_fragment

    try:
        return [read_fragment(text) for text in texts]
    except DocumentError as e:
        raise bad_request(f"Invalid request: {e}") from None


async def alternatives_options(service: Front, groups: list[Group], count: int) -> Options:
    """Beam search wide enough for ``count`` alternatives beside the best (the last hop's model's beam, or wider)."""
    last = await service.engine(groups[0].last_model)
    cfg = last.settings(Options())
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
    target = req.target or only_target(service, req.model)
    documents = read_documents(texts, req.format if req.split_sentences else "text")
    detected = await detect_sources(service, documents) if req.source == "auto" else None
    sources = [lang for lang, _ in detected] if detected else [req.source] * len(documents)
    options = Options(req.strategy, req.beam, req.nbest, req.alpha)
    try:
        if req.split_sentences:
            groups = await route_documents(service, documents, sources, target, req.model)
            await translate_groups(service, request, groups, options)
        else:
            groups, outputs = await translate_unsplit(service, request, texts, sources, target, req.model, options)
    except ClientLeft:
        return Response(status_code=CLIENT_CLOSED)
    cfg = (await service.engine(groups[0].last_model)).settings(options)
    nbest = cfg.nbest if cfg.strategy == "beam" else 1
    settings = {"strategy": cfg.strategy, "beam": cfg.beam_size, "nbest": nbest, "alpha": cfg.alpha,
                "length_penalty": cfg.length_penalty}
    if req.split_sentences:
        outputs = in_request_order(groups, [document_outputs(g.planned, g.outputs, nbest) for g in groups])
    return {
        "translations": [line_translation(o, nbest, req.scores) for o in outputs],
        "settings": settings,
        "models": models_used(groups),
        "time_ms": round((time.monotonic() - start) * 1000, 3),
    }


def only_target(service: Front, model: str | None) -> str:
    """/v1/translate's target when the request names none: the one target of the one model (named or served);
    400 when there are several to choose from."""
    router = service.models.router
    candidates = [m for m in router.models if model is None or m.name == model]
    targets = list(dict.fromkeys(t for m in candidates for t in m.targets))
    if len(targets) != 1:
        raise bad_request(f"Invalid request: missing target parameter ({router.describe(candidates or None)})")
    return targets[0]


async def translate_unsplit(
    service: Front, request: Request, texts: list[str], sources: list[str], target: str, model: str | None,
    options: Options,
) -> tuple[list[Group], list[Output]]:
    """``split_sentences: false``: each line of each text one sentence, as mt-translate reads a file; the
    lines of the texts of one route go through it as one job a hop. Returns the groups (no plans) and one
    output per line, in order."""
    models = service.models
    lines_of = [split_lines(text) for text in texts]
    groups = [Group(route, indices, None, models) for route, indices in routes(models, sources, target, model).items()]
    check_sentence_count(sum(map(len, lines_of)), service.settings.max_lines)
    found = await asyncio.gather(*(
        translate_lines(service, request, g, [line for i in g.indices for line in lines_of[i]], options)
        for g in groups))
    per_text: dict[int, list[Output]] = {}
    for group, outputs in zip(groups, found, strict=True):
        at = 0
        for i in group.indices:
            per_text[i] = outputs[at : at + len(lines_of[i])]
            at += len(lines_of[i])
    return groups, [o for i in range(len(texts)) for o in per_text[i]]


@router.get("/languages", response_model=list[Language], summary="Languages (LibreTranslate-compatible)")
async def get_languages(request: Request) -> Any:
    return languages(front(request).models.router)


@router.get("/frontend/settings", response_model=FrontendSettings,
            summary="The server's settings for a page (LibreTranslate-compatible)")
async def get_frontend_settings(request: Request) -> Any:
    from mt.document.formats import extensions

    service = front(request)
    return frontend_settings(service.models.router, service.settings, extensions())


@router.post("/detect", response_model=list[DetectedLanguage], responses=ERRORS,
             openapi_extra=body_schema(DetectRequest, DetectForm),
             summary="Detect the language of a text (LibreTranslate-compatible), among those the models read")
async def detect(request: Request) -> Any:
    service = front(request)
    params = await read_params(request)
    check_api_key(params.get("api_key"), service.settings.api_keys)
    texts, _ = text_items(params.get("q"))
    identifier = language_identifier(service)
    ranked = await asyncio.to_thread(identifier.detect, "\n".join(texts)[:DETECT_CHARS])
    return [{"confidence": confidence, "language": lang} for lang, confidence in ranked]


@router.get("/v1/models", response_model=list[ModelInfo], summary="The served models, their pairs and memory")
async def get_models(request: Request) -> Any:
    return [model_info(m) for m in front(request).models.models]


def model_info(model: ServedModel) -> dict[str, Any]:
    languages_of = model.spec.languages
    engine = model.engine
    return {
        "name": model.name,
        "pairs": [f"{s}-{t}" for s in languages_of.reads for t in languages_of.targets if s != t],
        "engine": model.spec.kind,
        "path": model.spec.what,
        "loaded": engine is not None,
        "parameters": getattr(engine, "parameters", None) if engine is not None else None,
        "resident_bytes": model.resident_bytes if engine is not None else 0,
        "loads": model.loads,
    }


@router.get("/health", response_model=Health, responses={503: {"model": Health}, 500: {"model": ErrorResponse}},
            summary="200 once the models loaded at start are warmed up")
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
