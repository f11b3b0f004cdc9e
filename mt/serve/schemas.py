"""Typed request and response bodies: what the OpenAPI schema (and so its docs page and the fuzz test) shows."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# the largest length-penalty exponent a request may ask for: usual values are 0.6-2, and a large one
# overflows the penalty's float ((5 + |Y|) / 6) ** alpha (1024 does for a 6-piece hypothesis)
MAX_ALPHA = 10.0


class LibreTranslateRequest(BaseModel):
    """POST /translate, LibreTranslate's parameters (also accepted as form fields or query parameters)."""

    q: str | list[str] = Field(description="text (paragraphs, any number of sentences) or a list of texts")
    source: str = Field("auto", description="source language code, or auto")
    target: str = Field(description="target language code")
    format: Literal["text", "html"] = Field("text", description="html: the markup is kept around the translation")
    alternatives: int = Field(0, ge=0, description="alternative translations to list beside the best (text only)")
    api_key: str | None = None


class LibreTranslateForm(BaseModel):
    q: str
    source: str = "auto"
    target: str
    format: Literal["text", "html"] = "text"
    alternatives: int = 0
    api_key: str | None = None


class DetectedLanguage(BaseModel):
    confidence: float
    language: str


class DetectRequest(BaseModel):
    """POST /detect (LibreTranslate's; also form fields): the text whose language to tell."""

    q: str = Field(description="text; its language is told among the languages the served models read")
    api_key: str | None = None


class DetectForm(BaseModel):
    q: str
    api_key: str | None = None


class LibreTranslateResponse(BaseModel):
    translatedText: str | list[str]  # noqa: N815  (LibreTranslate's name)
    detectedLanguage: DetectedLanguage | list[DetectedLanguage] | None = None  # noqa: N815  (with source=auto)
    alternatives: list[str] | list[list[str]] | None = None  # with alternatives > 0


class TranslateFileForm(BaseModel):
    """POST /translate_file's multipart fields (LibreTranslate's)."""

    file: bytes = Field(json_schema_extra={"format": "binary"},
                        description="the document; its extension names its format (/frontend/settings lists them)")
    source: str = Field("auto", description="source language code, or auto")
    target: str = Field(description="target language code")
    api_key: str | None = None


class TranslateFileResponse(BaseModel):
    translatedFileUrl: str  # noqa: N815  (LibreTranslate's name)


class LanguageName(BaseModel):
    code: str
    name: str


class FrontendLanguages(BaseModel):
    source: LanguageName
    target: LanguageName


class FrontendSettings(BaseModel):
    """GET /frontend/settings, LibreTranslate's keys (``mt.serve.libretranslate.frontend_settings``)."""

    charLimit: int  # noqa: N815
    frontendTimeout: int  # noqa: N815
    apiKeys: bool  # noqa: N815
    keyRequired: bool  # noqa: N815
    suggestions: bool
    filesTranslation: bool  # noqa: N815
    supportedFilesFormat: list[str]  # noqa: N815
    language: FrontendLanguages


class ErrorResponse(BaseModel):
    error: str


class Language(BaseModel):
    code: str
    name: str
    targets: list[str]


class TranslateV1Request(BaseModel):
    """POST /v1/translate: mt's own API with the decoding options (unset: the server's defaults)."""

    model_config = ConfigDict(extra="forbid")

    q: str | list[str] = Field(description="texts: a string or a list (each split into sentences; or lines)")
    split_sentences: bool = Field(True, description="false: each line is one sentence, as mt-translate's default")
    format: Literal["text", "html"] = "text"
    source: str = "auto"
    target: str | None = Field(None, description="target language code (default: the model's; needed with several)")
    model: str | None = Field(None, description="the model to use (/v1/models); default: routed by languages")
    strategy: Literal["beam", "greedy", "sample"] | None = None
    beam: int | None = Field(None, ge=1)
    nbest: int | None = Field(None, ge=1)
    alpha: float | None = Field(None, ge=0, le=MAX_ALPHA)
    scores: bool = Field(False, description="add each hypothesis' length-penalised log-probability")
    api_key: str | None = None


class Hypothesis(BaseModel):
    text: str
    score: float | None = None


class LineTranslation(BaseModel):
    text: str
    score: float | None = None
    nbest: list[Hypothesis] | None = None


class TranslateV1Response(BaseModel):
    translations: list[LineTranslation]
    settings: dict[str, str | int | float]
    models: list[str] = Field(description="the models that translated, in order (two for a pivot)")
    time_ms: float


class ModelInfo(BaseModel):
    """GET /v1/models: one served model."""

    name: str
    pairs: list[str] = Field(description="source-target pairs it translates directly")
    engine: str = Field(description="mt (a checkpoint or an ensemble) or ct2 (a CTranslate2 export)")
    path: str = Field(description="its checkpoint(s) or directory")
    loaded: bool
    parameters: int | None = Field(description="while loaded")
    resident_bytes: int = Field(description="what loading it added to the server's resident memory (0: unloaded)")
    loads: int = Field(description="times it was loaded (a lazy or unloaded model loads on its next request)")


class Health(BaseModel):
    status: str
