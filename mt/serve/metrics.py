"""Prometheus metrics of one app (its own registry, so several apps in one process do not collide)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from mt.serve.batching import BatchReport

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class Metrics:
    """Requests and errors by route and status, latency, batch sizes, queue depth, sentences and tokens."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("mt_requests", "HTTP requests by route and status", ["route", "code"], registry=r)
        self.errors = Counter("mt_errors", "HTTP requests answered with an error", ["route", "code"], registry=r)
        self.latency = Histogram("mt_request_seconds", "request latency", ["route"], buckets=LATENCY_BUCKETS,
                                 registry=r)
        self.batch_sentences = Histogram("mt_batch_sentences", "lines per decoded batch", buckets=SIZE_BUCKETS,
                                         registry=r)
        self.batch_requests = Histogram("mt_batch_requests", "requests per decoded batch", buckets=SIZE_BUCKETS,
                                        registry=r)
        self.batch_seconds = Histogram("mt_batch_seconds", "decoding time per batch", buckets=LATENCY_BUCKETS,
                                       registry=r)
        self.queue_depth = Histogram("mt_queue_depth", "requests waiting when one is queued", buckets=SIZE_BUCKETS,
                                     registry=r)
        self.failed_batches = Counter("mt_failed_batches", "batches whose decoding raised", registry=r)
        self.sentences = Counter("mt_sentences_translated", "lines translated (empty ones included)", registry=r)
        self.src_tokens = Counter("mt_source_tokens", "source pieces translated", registry=r)
        self.tgt_tokens = Counter("mt_target_tokens", "pieces generated (best hypothesis, EOS included)", registry=r)

    def observe_request(self, route: str, code: int, seconds: float) -> None:
        self.requests.labels(route, str(code)).inc()
        if code >= 400:
            self.errors.labels(route, str(code)).inc()
        self.latency.labels(route).observe(seconds)

    def observe_batch(self, report: BatchReport) -> None:
        """Called by the worker thread after each batch (prometheus_client is thread-safe)."""
        if report.failed:
            self.failed_batches.inc()
            return
        self.batch_requests.observe(report.jobs)
        self.batch_sentences.observe(len(report.lines))
        self.batch_seconds.observe(report.seconds)
        self.sentences.inc(len(report.lines))
        self.src_tokens.inc(sum(o.src_tokens for o in report.lines))
        self.tgt_tokens.inc(sum(o.tgt_tokens for o in report.lines))

    def render(self) -> bytes:
        return generate_latest(self.registry)
