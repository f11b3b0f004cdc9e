"""``ServeSettings``: the server's limits and batching knobs (one place for their defaults)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ServeSettings:
    """What ``mt-serve``'s flags set; the app, the worker and the limits read it."""

    # source tokens (incl. EOS) x beam the worker gathers for one engine call; None: GATHER_BATCHES times the
    # decoder's own batch budget (DecodeConfig.max_tokens), which the engine sorts and splits into batches
    max_batch_tokens: int | None = None
    max_wait_ms: float = 5.0  # how long the worker waits for more requests before decoding a partial batch
    max_queue: int = 256  # requests waiting for the worker; more are refused with 429
    max_beam: int = 16  # largest beam a request may ask for
    max_lines: int = 128  # lines in one request
    max_body_bytes: int = 1_000_000  # request body size (/translate_file's body: at least max_file_bytes)
    max_file_bytes: int = 10_000_000  # a file uploaded to /translate_file
    max_file_sentences: int = 5000  # sentences in one uploaded file (--max-lines does not apply to files)
    file_ttl_s: float = 600.0  # how long a translated file stays downloadable
    max_stored_bytes: int = 512 * 2**20  # translated files kept at once (the oldest are removed first)
    timeout_s: float = 60.0  # a request not answered in this time gets 504
    api_keys: frozenset[str] = field(default_factory=frozenset)  # empty: no key needed
    fill: bool = True  # warm up with the largest batch at the length limit too (``TorchEngine.fill``)
    threads: int = 0  # torch threads of the decoding worker (0: every core this process may use)
