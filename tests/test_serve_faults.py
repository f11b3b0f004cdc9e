"""mt-serve under load and faults: a full queue (429), a timeout (504), a client that leaves, a failing batch.

The engine is an untrained tiny model behind a gate (``GatedEngine``) that holds the decoding worker
busy until the test opens it, so the queue's state is known when each request arrives.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from export_helpers import untrained_checkpoint
from serve_helpers import GatedEngine, reference, serving, serving_unready, torch_engine

from mt.serve.settings import ServeSettings

WAIT_S = 30  # bound on every wait for the server's state


@pytest.fixture(scope="module")
def inner(tmp_path_factory):
    ckpt = untrained_checkpoint(tmp_path_factory.mktemp("serve_faults") / "untrained.pt")
    return torch_engine(ckpt, strategy="greedy", max_len_b=4)


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def body(q):
    return {"q": q, "source": "en", "target": "de"}


async def send(client: httpx.AsyncClient, url: str, q) -> httpx.Response:
    return await client.post(f"{url}/translate", json=body(q), timeout=WAIT_S)


def test_queued_requests_are_decoded_together_and_a_full_queue_answers_429(inner):
    engine = GatedEngine(inner)
    with serving(engine, ServeSettings(threads=1, max_queue=2)) as (url, app):
        worker = app.state.front.worker

        async def scenario():
            async with httpx.AsyncClient() as client:
                first = asyncio.create_task(send(client, url, "one"))
                await asyncio.to_thread(wait_until, engine.busy.is_set, "the first batch")
                queued = [asyncio.create_task(send(client, url, q)) for q in (["two", "three"], "four")]
                await asyncio.to_thread(wait_until, lambda: worker.depth() == 2, "two queued requests")
                refused = await send(client, url, "five")
                engine.gate.set()
                return refused, await first, await asyncio.gather(*queued)

        refused, first, queued = asyncio.run(scenario())
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    assert "queue is full" in refused.json()["error"]
    assert first.json()["translatedText"] == reference(inner, ["one"])[0]
    expected = [reference(inner, ["two", "three"]), reference(inner, ["four"])[0]]
    assert [r.json()["translatedText"] for r in queued] == expected
    assert engine.batches == [1, 3]  # the two queued requests (3 lines) were decoded as one batch


def test_a_request_over_the_timeout_gets_504_and_the_worker_goes_on(inner):
    engine = GatedEngine(inner)
    with serving(engine, ServeSettings(threads=1, timeout_s=0.2)) as (url, _):
        response = httpx.post(f"{url}/translate", json=body("one"), timeout=WAIT_S)
        assert response.status_code == 504 and "--timeout 0.2 s" in response.json()["error"]
        engine.gate.set()
        wait_until(lambda: not engine.busy.is_set(), "the held batch to end")
        again = httpx.post(f"{url}/translate", json=body("two"), timeout=WAIT_S)
        assert again.json()["translatedText"] == reference(inner, ["two"])[0]


def test_a_client_that_leaves_does_not_stop_the_batch_for_the_others(inner):
    engine = GatedEngine(inner)
    with serving(engine, ServeSettings(threads=1)) as (url, _):

        async def scenario():
            async with httpx.AsyncClient() as client, httpx.AsyncClient() as leaving:
                stays = asyncio.create_task(send(client, url, "one"))
                await asyncio.to_thread(wait_until, engine.busy.is_set, "the batch")
                queued_stays = asyncio.create_task(send(client, url, "two"))
                with pytest.raises(httpx.ReadTimeout):  # queued behind the held batch, then gone
                    await leaving.post(f"{url}/translate", json=body("three"), timeout=0.3)
                engine.gate.set()
                return await stays, await queued_stays

        stays, queued_stays = asyncio.run(scenario())
        assert stays.json()["translatedText"] == reference(inner, ["one"])[0]
        assert queued_stays.json()["translatedText"] == reference(inner, ["two"])[0]
        wait_until(lambda: '{code="499",route="/translate"}' in httpx.get(f"{url}/metrics").text, "the 499")
        assert httpx.post(f"{url}/translate", json=body("four"), timeout=WAIT_S).status_code == 200


def test_a_failing_batch_fails_its_requests_with_500_and_the_server_goes_on(inner):
    engine = GatedEngine(inner, fail_on="boom")
    engine.gate.set()
    with serving(engine, ServeSettings(threads=1)) as (url, _):
        failed = httpx.post(f"{url}/translate", json=body(["one", "boom"]), timeout=WAIT_S)
        assert failed.status_code == 500
        assert failed.json() == {"error": "Cannot translate text: RuntimeError: decoding failed on 'boom'"}
        after = httpx.post(f"{url}/translate", json=body("one"), timeout=WAIT_S)
        assert after.json()["translatedText"] == reference(inner, ["one"])[0]
        assert "mt_failed_batches_total{model=\"en-de\"} 1.0" in httpx.get(f"{url}/metrics").text


class SlowWarmUp(GatedEngine):
    """The warm-up itself waits for the gate (or fails with ``fail``)."""

    def __init__(self, inner, fail: bool = False) -> None:
        super().__init__(inner)
        self.fail = fail
        self.warmed = True  # every call, the warm-up included, waits at the gate

    def translate(self, lines, options, targets=None, on_done=None):
        if self.fail:
            raise RuntimeError("no memory for the model")
        return super().translate(lines, options, targets)


def test_health_is_503_until_the_warm_up_ran(inner):
    engine = SlowWarmUp(inner)
    with serving_unready(engine) as url:
        wait_until(engine.busy.is_set, "the warm-up")
        health = httpx.get(f"{url}/health")
        assert health.status_code == 503 and health.json() == {"status": "warming up"}
        early = httpx.post(f"{url}/translate", json=body("one"), timeout=WAIT_S)
        assert early.status_code == 503 and early.headers["Retry-After"] == "1"
        engine.gate.set()
        wait_until(lambda: httpx.get(f"{url}/health").status_code == 200, "health 200")
        assert httpx.post(f"{url}/translate", json=body("one"), timeout=WAIT_S).status_code == 200


def test_a_failed_warm_up_is_reported_by_health(inner):
    with serving_unready(SlowWarmUp(inner, fail=True)) as url:
        wait_until(lambda: httpx.get(f"{url}/health").status_code != 503, "the warm-up's end")
        health = httpx.get(f"{url}/health")
        assert health.status_code == 500 and "no memory for the model" in health.json()["error"]
        assert httpx.post(f"{url}/translate", json=body("one"), timeout=WAIT_S).status_code == 500
