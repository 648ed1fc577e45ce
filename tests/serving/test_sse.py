"""The SSE reader and the chunks of OpenAI streams (energyframe/serving/sse.py)."""

import json

import pytest

from energyframe.serving.sse import Chunk, MalformedChunk, SSEParser, read_chunk


def feed_all(lines):
    parser = SSEParser()
    out = [p for line in lines for p in parser.feed(line)]
    return out + parser.close()


def test_events_end_at_blank_lines_and_join_their_data_lines():
    lines = [": a comment", "event: message", "data: one", "data:two", "id: 7", "", "data: three", "", ""]
    assert feed_all(lines) == ["one\ntwo", "three"]


def test_an_event_the_stream_ends_inside_is_read_at_close():
    assert feed_all(["data: last"]) == ["last"]
    assert feed_all(["data: a\r\n", "\r\n"]) == ["a"]


def test_chat_and_completion_chunks():
    chat = {"choices": [{"index": 0, "delta": {"content": " hi"}, "finish_reason": None}]}
    assert read_chunk(json.dumps(chat)) == Chunk(text=" hi")
    role_only = {"choices": [{"index": 0, "delta": {"role": "assistant"}}]}
    assert read_chunk(json.dumps(role_only)) == Chunk()
    completion = {"choices": [{"index": 0, "text": "x", "finish_reason": "length"}]}
    assert read_chunk(json.dumps(completion)) == Chunk(text="x", finish_reason="length")
    reasoning = {"choices": [{"delta": {"content": None, "reasoning_content": "think"}}]}
    assert read_chunk(json.dumps(reasoning)).text == "think"


def test_usage_and_done():
    usage = {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}}
    assert read_chunk(json.dumps(usage)) == Chunk(prompt_tokens=12, output_tokens=5)
    assert read_chunk(json.dumps({"choices": [], "usage": None})) == Chunk()
    assert read_chunk("[DONE]") == Chunk(done=True)


@pytest.mark.parametrize(
    "error, message", [({"message": "out of memory", "code": 500}, "out of memory"), ("boom", "boom")]
)
def test_error_events_as_vllm_and_transformers_send_them(error, message):
    assert read_chunk(json.dumps({"error": error})) == Chunk(error=message)


@pytest.mark.parametrize("payload", ["{not json", "[1, 2]", '"text"'])
def test_malformed_payloads(payload):
    with pytest.raises(MalformedChunk):
        read_chunk(payload)
