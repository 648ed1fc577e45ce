"""One streamed request against a real local server, and every way it can end
(energyframe/serving/client.py)."""

import asyncio
import math
import socket

import httpx
import pytest

from energyframe.serving import client as c
from energyframe.serving.prompts import Prompt
from tests.serving.server import FakeServer


def send(url, prompt, timeout_s=10.0, endpoint="chat", stream_usage=True, extra=None):
    async def go():
        async with httpx.AsyncClient(trust_env=False) as http:
            client = c.StreamingClient(http, url, "tiny", endpoint, timeout_s, stream_usage, extra)
            return await client.send(prompt, 0.0, 0.0)

    return asyncio.run(go())


@pytest.fixture(scope="module")
def server():
    with FakeServer(ttft_s=0.01, gap_s=0.002) as s:
        yield s


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_a_streamed_request_gives_its_tokens_times_and_usage(server, endpoint):
    r = send(server.url, Prompt("a", text="one two three @tokens=6", max_tokens=6), endpoint=endpoint)
    assert (r.status, r.http_status, r.finish_reason, r.error) == (c.OK, 200, "length", "")
    assert (r.prompt_tokens, r.output_tokens, r.chunks) == (4, 6, 6)
    assert r.sent_s <= r.first_token_s == r.token_times_s[0] <= r.token_times_s[-1] <= r.end_s
    body = server.received[-1].body
    assert (
        body["stream"] is True
        and body["max_tokens"] == 6
        and body["stream_options"] == {"include_usage": True}
    )
    assert ("messages" in body) == (endpoint == "chat") and ("prompt" in body) == (endpoint == "completions")


def test_the_body_takes_the_extra_fields_and_the_prompts_own(server):
    send(
        server.url,
        Prompt("a", text="x", extra={"temperature": 0}),
        stream_usage=False,
        extra={"ignore_eos": True},
    )
    body = server.received[-1].body
    assert body["ignore_eos"] is True and body["temperature"] == 0 and "stream_options" not in body


@pytest.mark.parametrize(
    "fault, status, error",
    [
        ("http500", c.HTTP_ERROR, 'HTTP 500: {"error": {"message": "injected http500"}}'),
        ("http429", c.HTTP_ERROR, 'HTTP 429: {"error": {"message": "injected http429"}}'),
        ("end", c.TRUNCATED, "the stream ended after 2 chunks, without [DONE] or a finish reason"),
        (
            "malformed",
            c.MALFORMED,
            "unreadable SSE data '{not json' (Expecting property name enclosed in double quotes)",
        ),
        ("error", c.SERVER_ERROR, "the server reported: injected error event"),
    ],
)
def test_faults_end_the_request_with_its_status(server, fault, status, error):
    r = send(server.url, Prompt("f", text=f"x @fault={fault}"))
    assert (r.status, r.error) == (status, error)
    assert r.chunks == (0 if fault.startswith("http") else 2)


def test_a_dropped_connection_is_a_truncated_stream(server):
    r = send(server.url, Prompt("f", text="x @fault=close"))
    assert r.status == c.TRUNCATED and r.error.startswith("the connection broke after 2 chunks")


def test_a_stalled_stream_ends_at_the_timeout(server):
    r = send(server.url, Prompt("f", text="x @fault=stall"), timeout_s=0.5)
    assert (r.status, r.error, r.chunks) == (c.TIMEOUT, "no end within 0.5 s (2 chunks came)", 2)
    assert r.end_s - r.sent_s >= 0.5


def test_a_server_without_usage_or_done_still_ends_ok():
    with FakeServer(usage="never", done=False, refuse_stream_options=True) as s:
        refused = send(s.url, Prompt("a", text="x @tokens=3"))
        assert refused.status == c.HTTP_ERROR and "stream_options" in refused.error
        r = send(s.url, Prompt("a", text="x @tokens=3"), stream_usage=False)
    assert (r.status, r.output_tokens, r.chunks, r.finish_reason) == (c.OK, None, 3, "length")


def test_nothing_listening_is_a_connect_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed when the block ends: nothing listens there
    r = send(f"http://127.0.0.1:{port}/v1", Prompt("a", text="x"))
    assert r.status == c.CONNECT_ERROR and r.error.startswith(
        f"cannot connect to http://127.0.0.1:{port}/v1/chat/completions"
    )
    assert math.isnan(r.first_token_s) and r.end_s >= r.sent_s
