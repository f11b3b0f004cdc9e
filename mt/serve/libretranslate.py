"""LibreTranslate's request format: parameters as a JSON body, form fields or URL query parameters.

As LibreTranslate reads them: a JSON body (``Content-Type: application/json``) holds every parameter;
otherwise form fields (urlencoded or multipart) and query parameters are merged (query first, as
Flask's ``request.values`` does). ``q`` is a string or (JSON only) a list of strings, and the answer's
``translatedText`` has the same shape. Each string is a document (``format=text``: plain text, every line
break and blank line kept; ``format=html``: markup kept), split into sentences (``mt.serve.documents``).
Bytes that are not UTF-8 are a 400.

``GET /frontend/settings`` (``frontend_settings``) answers LibreTranslate's keys from the server's own
settings: ``charLimit`` the characters that always fit in a /translate body within ``--max-body-bytes``
(``(--max-body-bytes - 1000) // 6``: 1000 bytes for the other fields, and at most 6 bytes a character, as
a browser counts them (UTF-16 units), in a JSON or multipart body: a control character escapes to
``\\u00XX``; never -1, mt always has a body limit; ``--max-lines`` bounds the sentences besides);
``frontendTimeout`` LibreTranslate's default 500 (the milliseconds its page waits after typing before it
translates; mt's page translates on its button); ``apiKeys`` and ``keyRequired`` whether ``--api-keys`` is
given (every request then needs a key); ``suggestions`` false (mt takes none); ``filesTranslation`` true;
``supportedFilesFormat`` every extension ``/translate_file`` reads (``mt.document.formats.extensions``);
``language`` the first model's source and its first target language.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request

from mt.serve.language_codes import NAMES
from mt.serve.limits import check_text
from mt.serve.problems import bad_request
from mt.serve.routing import Router
from mt.serve.settings import ServeSettings

FIELD_ROOM = 1000  # bytes of a /translate body besides the text: the other fields, JSON or multipart syntax
BYTES_PER_CHAR = 6  # the most one UTF-16 unit takes in a JSON body (a control character as \u00XX)
FRONTEND_TIMEOUT_MS = 500  # LibreTranslate's default --frontend-timeout


def language_name(code: str) -> str:
    """A code's English name (LibreTranslate's languages: ``mt.serve.language_codes``), else the code."""
    return NAMES.get(code, code)


def decode_utf8(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise bad_request(f"{what} is not valid UTF-8 (byte {e.start})") from None


def parse_query(raw: bytes, what: str) -> dict[str, str]:
    """``a=1&b=2`` (percent-escapes decoded strictly as UTF-8); the first value of a repeated name wins."""
    try:
        pairs = parse_qsl(decode_utf8(raw, what), keep_blank_values=True, errors="strict")
    except UnicodeDecodeError:
        raise bad_request(f"{what} is not valid UTF-8") from None
    params: dict[str, str] = {}
    for name, value in pairs:
        params.setdefault(name, value)
    return params


async def read_json_object(request: Request) -> dict[str, Any]:
    """The body as a JSON object; 400 for invalid UTF-8, malformed JSON or another JSON type."""
    text = decode_utf8(await request.body(), "the request body")
    try:
        body = json.loads(text)
    except json.JSONDecodeError as e:
        raise bad_request(f"Invalid request: malformed JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise bad_request("Invalid request: the JSON body is nested too deeply") from None
    if not isinstance(body, dict):
        raise bad_request(f"Invalid request: the JSON body must be an object, got {type(body).__name__}")
    return body


async def read_params(request: Request) -> dict[str, Any]:
    """The request's parameters, wherever LibreTranslate would look for them (see the module docstring)."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "application/json":
        return await read_json_object(request)
    params = parse_query(request.scope.get("query_string", b""), "the query string")
    if content_type == "application/x-www-form-urlencoded":
        for name, value in parse_query(await request.body(), "the form body").items():
            params.setdefault(name, value)
    elif content_type == "multipart/form-data":
        for name, value in parse_multipart(await request.body(), request.headers["content-type"]).items():
            params.setdefault(name, value)
    return params


def parse_multipart(body: bytes, content_type: str) -> dict[str, str]:
    """Text fields of a ``multipart/form-data`` body, each strictly UTF-8 (Starlette's parser would fall back
    to Latin-1 silently); files are refused. The first value of a repeated name wins."""
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode("latin-1", "replace")
    message = BytesParser(policy=HTTP).parsebytes(head + body)
    if not message.is_multipart():
        raise bad_request("Invalid request: malformed multipart body (no boundary)")
    fields: dict[str, str] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            raise bad_request("Invalid request: a multipart part without a field name")
        if part.get_filename() is not None:
            raise bad_request(f"Invalid request: {name} must be a text field, not a file")
        payload = part.get_payload(decode=True) or b""
        fields.setdefault(name, decode_utf8(payload, f"form field {name}"))
    return fields


FORMATS = ("text", "html")


@dataclass(frozen=True)
class TextRequest:
    """``q`` as a list of texts (``is_list``: whether the answer is a list), its languages, its format
    (``text`` or ``html``) and how many alternatives the answer lists for each text (0: none)."""

    texts: list[str]
    is_list: bool
    source: str
    target: str
    format: str = "text"
    alternatives: int = 0

    def shape(self, translated: list[Any]) -> Any:
        """One value per text, in ``q``'s shape (a list, or the one value)."""
        return translated if self.is_list else translated[0]


def string_param(params: dict[str, Any], name: str, default: str | None = None) -> str:
    """A string parameter; 400 when missing (without a default) or of another type."""
    value = params.get(name, default)
    if value is None or value == "":
        if default is not None:
            return default
        raise bad_request(f"Invalid request: missing {name} parameter")
    if not isinstance(value, str):
        raise bad_request(f"Invalid request: {name} must be a string, got {type(value).__name__}")
    check_text(value, name)
    return value


def count_param(params: dict[str, Any], name: str, most: int) -> int:
    """A whole number 0..``most`` (JSON number, or a form field's digits); 400 otherwise."""
    value = params.get(name, 0)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
        raise bad_request(f"Invalid request: {name} must be a whole number from 0 to {most}, got {value!r}")
    return value


def text_items(q: Any) -> tuple[list[str], bool]:
    """``q`` (a string or a list of strings) as a list of texts; 400 for anything else or nothing at all."""
    if isinstance(q, str):
        texts, is_list = [q], False
    elif isinstance(q, list) and all(isinstance(item, str) for item in q):
        texts, is_list = list(q), True
    else:
        raise bad_request("Invalid request: q must be a string or a list of strings")
    for item in texts:
        check_text(item, "q")
    if not any(texts):
        raise bad_request("Invalid request: missing q parameter")
    return texts, is_list


def parse_text_request(params: dict[str, Any], max_alternatives: int, default_source: str = "") -> TextRequest:
    """q, source, target, format and alternatives checked for presence and type (the languages are checked
    against the model later, the sentence count once the texts are split)."""
    if "q" not in params or params["q"] is None:
        raise bad_request("Invalid request: missing q parameter")
    texts, is_list = text_items(params["q"])
    source = string_param(params, "source", default_source or None)
    target = string_param(params, "target")
    text_format = string_param(params, "format", "text")
    if text_format not in FORMATS:
        raise bad_request(f"format {text_format} is not supported (text or html)")
    alternatives = count_param(params, "alternatives", max_alternatives)
    return TextRequest(texts, is_list, source, target, text_format, alternatives)


def languages(router: Router) -> list[dict[str, Any]]:
    """GET /languages: every language of the served models, each with the targets it reaches (directly or
    through one pivot), in the order the model list names them."""
    return [{"code": lang, "name": language_name(lang), "targets": router.targets_of(lang)}
            for lang in router.languages()]


def char_limit(max_body_bytes: int) -> int:
    """The characters (UTF-16 units, as a browser counts them) that always fit in a body of ``max_body_bytes``."""
    return max(1, (max_body_bytes - FIELD_ROOM) // BYTES_PER_CHAR)


def frontend_settings(router: Router, settings: ServeSettings, file_extensions: list[str]) -> dict[str, Any]:
    """GET /frontend/settings in LibreTranslate's shape (each key's meaning here: the module docstring)."""
    source_lang = router.sources()[0]
    target_lang = router.targets_of(source_lang)[0]
    return {
        "charLimit": char_limit(settings.max_body_bytes),
        "frontendTimeout": FRONTEND_TIMEOUT_MS,
        "apiKeys": bool(settings.api_keys),
        "keyRequired": bool(settings.api_keys),
        "suggestions": False,
        "filesTranslation": True,
        "supportedFilesFormat": list(file_extensions),
        "language": {
            "source": {"code": source_lang, "name": language_name(source_lang)},
            "target": {"code": target_lang, "name": language_name(target_lang)},
        },
    }
