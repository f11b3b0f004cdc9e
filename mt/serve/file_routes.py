"""LibreTranslate's file routes: ``POST /translate_file`` and ``GET /download_file/<token>/<name>``.

``/translate_file`` takes a multipart body (``file``, ``source``, ``target``, ``api_key``; query parameters
count too, as for /translate), picks the file's format by its extension (``mt.document.formats``), reads it,
translates its sentences as one job a hop of its route (``mt.serve.translation``: as /translate
translates a text; ``source=auto``: the language the identifier tells from its text), writes the
translated file, stores it (``files.FileStore``) and answers ``{"translatedFileUrl": ".../download_file/
<token>/<name>.<target>.<ext>"}``, where ``<token>`` is 43 random URL-safe characters. The URL answers the
file as an attachment for ``--file-ttl`` seconds, then 404. Refusals: 400 for a missing file, an
extension no format reads, a file its format cannot read (naming the file), more sentences than
``--max-file-sentences``; 413 for a file over ``--max-file-bytes`` (``--max-lines`` does not apply to files).
Reading, planning and writing a document run in a thread: the event loop only parses the upload and waits.
"""

from __future__ import annotations

import asyncio
from pathlib import PurePath, PurePosixPath, PureWindowsPath
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException

from mt.document.errors import DocumentError
from mt.document.formats import Document, Format, format_for
from mt.serve.documents import Planned, plan
from mt.serve.engine import Engine, Options, Output
from mt.serve.files import FileStore, StoreFull, download_name
from mt.serve.front import ClientLeft
from mt.serve.libretranslate import parse_query, string_param
from mt.serve.limits import check_api_key
from mt.serve.models import ModelSet
from mt.serve.problems import ApiError, bad_request
from mt.serve.routes import CLIENT_CLOSED, ERRORS, front
from mt.serve.routing import Route
from mt.serve.schemas import ErrorResponse, TranslateFileForm, TranslateFileResponse
from mt.serve.translation import Group, detect_sources, route_of, translate_groups

MAX_FIELDS = 8  # file, source, target, api_key and a few a client may add
FILE_ERRORS = {**ERRORS, 507: {"model": ErrorResponse, "description": "translated file over --max-stored-bytes"}}

router = APIRouter()


def store(request: Request) -> FileStore:
    return request.app.state.files


async def read_upload(request: Request) -> tuple[dict[str, Any], UploadFile]:
    """The text parameters (query, then form fields) and the uploaded file; 400 without a multipart file."""
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != "multipart/form-data":
        raise bad_request("Invalid request: send the file as multipart/form-data (field file)")
    try:
        form = await request.form(max_files=1, max_fields=MAX_FIELDS)
    except HTTPException as e:  # python-multipart's parse errors, through Starlette
        raise bad_request(f"Invalid request: {e.detail}") from None
    try:
        params: dict[str, Any] = parse_query(request.scope.get("query_string", b""), "the query string")
        upload = None
        for name, value in form.multi_items():
            if isinstance(value, UploadFile):
                if name != "file":
                    raise bad_request(f"Invalid request: {name} must be a text field, not a file")
                upload = value
            else:
                params.setdefault(name, value)
        if upload is None:
            raise bad_request("Invalid request: missing file parameter")
    except ApiError:
        await form.close()  # the spooled upload's temporary file
        raise
    return params, upload


def uploaded_name(upload: UploadFile) -> str:
    """The upload's file name without any directories a client put in it; 400 when it has none."""
    name = PureWindowsPath(PurePosixPath(upload.filename or "").name).name
    if not name:
        raise bad_request("Invalid request: the file has no name (its extension names its format)")
    return name


def read_document(data: bytes, name: str) -> tuple[Format, Document]:
    """The file's format and its document (run in a thread: reading is CPU work)."""
    file_format = format_for(name)
    return file_format, file_format.read(data, name)


def write_and_store(planned: Planned, outputs: list[Output], files: FileStore, name: str, media_type: str) -> str:
    """The translated file written and stored (run in a thread); its token."""
    return files.put(planned.finish(outputs)[0], name, media_type)


@router.post(
    "/translate_file",
    response_model=TranslateFileResponse,
    responses=FILE_ERRORS,
    openapi_extra={"requestBody": {"required": True, "content": {
        "multipart/form-data": {"schema": TranslateFileForm.model_json_schema()}}}},
    summary="Translate a file (LibreTranslate-compatible); the answer's URL downloads the translation",
)
async def translate_file(request: Request) -> Any:
    service = front(request)
    settings = service.settings
    params, upload = await read_upload(request)
    try:
        check_api_key(params.get("api_key"), settings.api_keys)
        source = string_param(params, "source", "auto")
        target = string_param(params, "target")
        if source != "auto":
            route_of(service.models, source, target)  # a pair not served: 400 before the upload is read
        name = uploaded_name(upload)
        if upload.size is not None and upload.size > settings.max_file_bytes:
            raise ApiError(413, f"file over --max-file-bytes {settings.max_file_bytes}")
        data = await upload.read()
    finally:
        await upload.close()
    if len(data) > settings.max_file_bytes:
        raise ApiError(413, f"file over --max-file-bytes {settings.max_file_bytes}")
    try:
        file_format, document = await asyncio.to_thread(read_document, data, name)
    except DocumentError as e:
        raise bad_request(str(e)) from None
    language = (await detect_sources(service, [document]))[0][0] if source == "auto" else source
    models = service.models
    route = route_of(models, language, target)
    engine = await service.engine(models[route.first.model])
    group = await asyncio.to_thread(plan_file, route, models, engine, document, settings.max_file_sentences, name)
    try:
        await translate_groups(service, request, [group], Options())
    except ClientLeft:
        return Response(status_code=CLIENT_CLOSED)
    translated = download_name(name, target, PurePath(name).suffix.lower())
    try:
        token = await asyncio.to_thread(write_and_store, group.planned, group.outputs, store(request), translated,
                                        file_format.media_type)
    except StoreFull as e:
        raise ApiError(507, str(e)) from None
    url = request.url_for("download_file", token=token, filename=quote(translated))
    return {"translatedFileUrl": str(url)}


def plan_file(route: Route, models: ModelSet, engine: Engine, document: Document, max_sentences: int,
              name: str) -> Group:
    """The file's sentences on ``route``, planned by its first model's ``engine`` (run in a thread: splitting
    is CPU work); 400 for more than ``--max-file-sentences``."""
    planned = plan([document], route.first.source, engine, route.first.tag)
    count = len(planned.sentences)
    if count > max_sentences:
        raise bad_request(f"{name}: {count} sentences, more than --max-file-sentences {max_sentences}")
    return Group(route, [0], planned, models)


def attachment(name: str) -> str:
    """A Content-Disposition naming ``name`` (already safe: letters, digits, ``.-_`` and spaces), also for
    clients that read only the ASCII ``filename``."""
    fallback = name.encode("ascii", "replace").decode("ascii").replace("?", "_")
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(name)}"


@router.get(
    "/download_file/{token}/{filename}",
    response_class=Response,
    responses={200: {"content": {"application/octet-stream": {}}, "description": "the translated file"},
               404: {"model": ErrorResponse, "description": "no such file, or it expired"}},
    summary="Download a file /translate_file translated (for --file-ttl seconds after)",
)
async def download_file(request: Request, token: str, filename: str) -> Response:
    files = store(request)
    found = await asyncio.to_thread(files.get, token, filename)
    if found is None:
        raise ApiError(404, f"no such file (a translated file is kept for --file-ttl {files.ttl_s:g} s)")
    stored, data = found
    headers = {"content-type": stored.media_type, "content-disposition": attachment(stored.name),
               "cache-control": "no-store", "x-content-type-options": "nosniff"}
    return Response(data, headers=headers)
