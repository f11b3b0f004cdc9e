"""Prometheus metrics of one app (its own registry, so several apps in one process do not collide)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from mt.serve.batching import BatchReport
from mt.serve.models import ServedModel

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class Metrics:
    """Requests and errors by route and status, latency; by model: jobs and their latency, batch sizes,
    sentences and tokens, loads and resident memory; the queue depth."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("mt_requests", "HTTP requests by route and status", ["route", "code"], registry=r)
        self.errors = Counter("mt_errors", "HTTP requests answered with an error", ["route", "code"], registry=r)
        self.latency = Histogram("mt_request_seconds", "request latency", ["route"], buckets=LATENCY_BUCKETS,
                                 registry=r)
        self.batch_sentences = Histogram("mt_batch_sentences", "lines per decoded batch", ["model"],
                                         buckets=SIZE_BUCKETS, registry=r)
        self.batch_requests = Histogram("mt_batch_requests", "requests per decoded batch", ["model"],
                                        buckets=SIZE_BUCKETS, registry=r)
        self.batch_seconds = Histogram("mt_batch_seconds", "decoding time per batch", ["model"],
                                       buckets=LATENCY_BUCKETS, registry=r)
        self.queue_depth = Histogram("mt_queue_depth", "requests waiting when one is queued", buckets=SIZE_BUCKETS,
                                     registry=r)
        self.failed_batches = Counter("mt_failed_batches", "batches whose decoding raised", ["model"], registry=r)
        self.sentences = Counter("mt_sentences_translated", "lines translated (empty ones included)", ["model"],
                                 registry=r)
        self.src_tokens = Counter("mt_source_tokens", "source pieces translated", ["model"], registry=r)
        self.tgt_tokens = Counter("mt_target_tokens", "pieces generated (best hypothesis, EOS included)", ["model"],
                                  registry=r)
        self.model_requests = Counter("mt_model_requests", "translation jobs by model (a pivot's request: one "
                                      "per hop)", ["model"], registry=r)
        self.model_latency = Histogram("mt_model_request_seconds", "a job's time from queued to answered, by model",
                                       ["model"], buckets=LATENCY_BUCKETS, registry=r)
        self.resident = Gauge("mt_model_resident_bytes", "what loading the model added to resident memory "
                              "(0: not loaded)", ["model"], registry=r)
        self.loads = Counter("mt_model_loads", "times a model was loaded", ["model"], registry=r)

    def observe_request(self, route: str, code: int, seconds: float) -> None:
        self.requests.labels(route, str(code)).inc()
        if code >= 400:
            self.errors.labels(route, str(code)).inc()
        self.latency.labels(route).observe(seconds)

    def observe_job(self, model: str, seconds: float) -> None:
        self.model_requests.labels(model).inc()
        self.model_latency.labels(model).observe(seconds)

    def observe_load(self, model: ServedModel, unloaded: list[ServedModel]) -> None:
        """A model loaded (and those unloaded to make room); also called for the models loaded at start."""
        self.loads.labels(model.name).inc()
        self.resident.labels(model.name).set(model.resident_bytes)
        for other in unloaded:
            self.resident.labels(other.name).set(0)

    def observe_batch(self, report: BatchReport) -> None:
        """Called by the worker thread after each batch (prometheus_client is thread-safe)."""
        model = report.model
        if report.failed:
            self.failed_batches.labels(model).inc()
            return
        self.batch_requests.labels(model).observe(report.jobs)
        self.batch_sentences.labels(model).observe(len(report.lines))
        self.batch_seconds.labels(model).observe(report.seconds)
        self.sentences.labels(model).inc(len(report.lines))
        self.src_tokens.labels(model).inc(sum(o.src_tokens for o in report.lines))
        self.tgt_tokens.labels(model).inc(sum(o.tgt_tokens for o in report.lines))

    def render(self) -> bytes:
        return generate_latest(self.registry)
