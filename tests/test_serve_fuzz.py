"""Fuzz mt-serve's OpenAPI schema with schemathesis (valid and invalid bodies, queries, headers): never a 500.

Each operation gets a bounded number of generated requests per mode against a live server (an
untrained tiny model with short outputs), so the test's time is bounded too.
"""

from __future__ import annotations

import pytest
import schemathesis
from export_helpers import untrained_checkpoint
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from serve_helpers import serving, torch_engine

from mt.serve.settings import ServeSettings

EXAMPLES = 25  # generated requests per operation and mode


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    ckpt = untrained_checkpoint(tmp_path_factory.mktemp("serve_fuzz") / "untrained.pt")
    engine = torch_engine(ckpt, strategy="greedy", max_len_b=4)
    with serving(engine, ServeSettings(threads=1, max_lines=16, max_beam=4)) as (url, _):
        yield url


def operations(url: str):
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    return [result.ok() for result in schema.get_all_operations()]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=lambda m: m.value)
def test_no_generated_request_gets_a_server_error(server, mode):
    ops = operations(server)
    assert {op.path for op in ops} >= {"/translate", "/v1/translate", "/languages", "/health", "/metrics"}
    for op in ops:
        if mode == GenerationMode.NEGATIVE and op.method.upper() != "POST":
            continue  # the GET routes take no input to make invalid

        @given(case=op.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
                  database=None)
        def no_server_error(case):
            response = case.call(base_url=server, timeout=30)
            assert response.status_code < 500, (case.method, case.path, case.body, response.text)

        no_server_error()
