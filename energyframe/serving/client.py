"""One streamed request to an OpenAI-compatible server, timed on this host's monotonic clock.

Every request ends with a status, never an exception: the load goes on, and requests.csv says
what became of each. The HTTP client is httpx (async, streaming).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .prompts import Prompt
from .sse import Chunk, MalformedChunk, SSEParser, read_chunk

if TYPE_CHECKING:
    import httpx

#: the request streamed to its end (``[DONE]``, or a finish reason before the stream closed)
OK = "ok"
#: the server answered 4xx or 5xx
HTTP_ERROR = "http_error"
#: no connection (the server is down, or refused it)
CONNECT_ERROR = "connect_error"
#: no end within ``--request-timeout`` (a slow server, or a stream that stalled)
TIMEOUT = "timeout"
#: the stream ended (or the connection closed) before its end
TRUNCATED = "truncated"
#: the stream held data that is not a completion chunk
MALFORMED = "malformed"
#: the server sent an error event inside the stream
SERVER_ERROR = "server_error"
#: Ctrl-C or SIGTERM ended the load while the request went
CANCELLED = "cancelled"
#: anything else the HTTP client raised
ERROR = "error"
STATUSES = (OK, HTTP_ERROR, CONNECT_ERROR, TIMEOUT, TRUNCATED, MALFORMED, SERVER_ERROR, CANCELLED, ERROR)
#: the paths of the two endpoints, under the server's base URL (``.../v1``)
ENDPOINTS = {"chat": "/chat/completions", "completions": "/completions"}
#: how much of an error response's body a record keeps. Units: characters.
ERROR_TEXT = 300


@dataclass(frozen=True)
class RequestRecord:
    """What happened to one request. Times are this host's ``time.monotonic()``. Units: s.

    Args:
        request_id: the prompt's id.
        status: one of ``STATUSES``.
        scheduled_s: when it was due (its arrival time).
        ready_s: when it could go (due, and a ``--concurrency`` slot free).
        sent_s: when the request was handed to the HTTP client.
        first_token_s: its first generated text (NaN without one).
        end_s: the end of its stream, or when it failed.
        token_times_s: when each chunk of generated text arrived.
        prompt_tokens, output_tokens: the server's ``usage`` (``None`` where not reported).
        http_status: the response's status code (``None`` without a response).
        finish_reason: the server's, where it gave one.
        error: what went wrong, for any status but ``ok``.
    """

    request_id: str
    status: str
    scheduled_s: float
    ready_s: float
    sent_s: float
    first_token_s: float
    end_s: float
    token_times_s: tuple[float, ...] = ()
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    http_status: int | None = None
    finish_reason: str | None = None
    error: str = ""

    @property
    def chunks(self) -> int:
        """Chunks of generated text received (one token each on most servers)."""
        return len(self.token_times_s)


@dataclass
class _Seen:
    """A request while it streams: what a record is made of, whenever it ends."""

    request_id: str
    scheduled_s: float
    ready_s: float
    sent_s: float = math.nan
    tokens: list[float] = field(default_factory=list)
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    http_status: int | None = None
    finish_reason: str | None = None

    def take(self, chunk: Chunk, now: float) -> None:
        if chunk.text:
            self.tokens.append(now)
        if chunk.finish_reason is not None:
            self.finish_reason = chunk.finish_reason
        if chunk.prompt_tokens is not None:
            self.prompt_tokens = chunk.prompt_tokens
        if chunk.output_tokens is not None:
            self.output_tokens = chunk.output_tokens

    def record(self, status: str, error: str = "", end_s: float | None = None) -> RequestRecord:
        end = time.monotonic() if end_s is None else end_s
        sent = self.sent_s if math.isfinite(self.sent_s) else end
        return RequestRecord(
            request_id=self.request_id,
            status=status,
            scheduled_s=self.scheduled_s,
            ready_s=self.ready_s,
            sent_s=sent,
            first_token_s=self.tokens[0] if self.tokens else math.nan,
            end_s=max(end, sent),
            token_times_s=tuple(self.tokens),
            prompt_tokens=self.prompt_tokens,
            output_tokens=self.output_tokens,
            http_status=self.http_status,
            finish_reason=self.finish_reason,
            error=error,
        )


class StreamingClient:
    """Sends prompts to one server and model, streamed, each within ``timeout_s``.

    Args:
        http: the httpx client every request goes through.
        base_url: the server's OpenAI base URL (``http://127.0.0.1:8000/v1``).
        model: the ``model`` field of every request.
        endpoint: ``chat`` or ``completions``.
        timeout_s: the longest a request may take, from its send to its end. Units: s.
        stream_usage: ask for token counts in the stream (``stream_options``); some servers
            refuse the field (``transformers serve``) and report usage anyway.
        extra_body: fields added to every request (``{"ignore_eos": true}`` for vLLM).
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        base_url: str,
        model: str,
        endpoint: str = "chat",
        timeout_s: float = 300.0,
        stream_usage: bool = True,
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        self.http = http
        self.url = base_url.rstrip("/") + ENDPOINTS[endpoint]
        self.model, self.endpoint, self.timeout_s = model, endpoint, timeout_s
        self.stream_usage = stream_usage
        self.extra_body = dict(extra_body or {})

    def body(self, prompt: Prompt) -> dict[str, Any]:
        """The JSON body of ``prompt``'s request."""
        body: dict[str, Any] = {"model": self.model, "stream": True}
        if self.endpoint == "chat":
            body["messages"] = list(prompt.messages) or [{"role": "user", "content": prompt.text}]
        else:
            body["prompt"] = prompt.text
        if prompt.max_tokens is not None:
            body["max_tokens"] = prompt.max_tokens
        if self.stream_usage:
            body["stream_options"] = {"include_usage": True}
        return {**body, **self.extra_body, **prompt.extra}

    async def send(self, prompt: Prompt, scheduled_s: float, ready_s: float) -> RequestRecord:
        """Send ``prompt`` now and stream its answer; the record says how it ended (a Ctrl-C
        that cancels the load ends it ``cancelled``)."""
        seen = _Seen(prompt.request_id, scheduled_s, ready_s)
        try:
            return await asyncio.wait_for(self._stream(prompt, seen), self.timeout_s)
        except asyncio.TimeoutError:
            return seen.record(
                TIMEOUT, f"no end within {self.timeout_s:g} s ({len(seen.tokens)} chunks came)"
            )
        except asyncio.CancelledError:
            return seen.record(CANCELLED, "the load was interrupted")

    async def _stream(self, prompt: Prompt, seen: _Seen) -> RequestRecord:
        import httpx

        body = self.body(prompt)
        seen.sent_s = time.monotonic()
        try:
            async with self.http.stream("POST", self.url, json=body) as response:
                seen.http_status = response.status_code
                if response.status_code >= 400:
                    text = (await response.aread()).decode("utf-8", "replace")
                    return seen.record(
                        HTTP_ERROR, f"HTTP {response.status_code}: {' '.join(text.split())[:ERROR_TEXT]}"
                    )
                return await self._read(response, seen)
        except (httpx.ConnectError, httpx.ConnectTimeout) as e:
            return seen.record(CONNECT_ERROR, f"cannot connect to {self.url}: {e or type(e).__name__}")
        except (httpx.RemoteProtocolError, httpx.ReadError) as e:
            return seen.record(
                TRUNCATED, f"the connection broke after {len(seen.tokens)} chunks: {e or type(e).__name__}"
            )
        except httpx.HTTPError as e:
            return seen.record(ERROR, f"{type(e).__name__}: {e}")

    async def _read(self, response: httpx.Response, seen: _Seen) -> RequestRecord:
        parser = SSEParser()
        async for line in response.aiter_lines():
            now = time.monotonic()
            for payload in parser.feed(line):
                ended = self._take(payload, now, seen)
                if ended is not None:
                    return ended
        now = time.monotonic()
        for payload in parser.close():
            ended = self._take(payload, now, seen)
            if ended is not None:
                return ended
        if seen.finish_reason is not None:  # no [DONE] (transformers serve sends none): ended all the same
            return seen.record(OK, end_s=now)
        return seen.record(
            TRUNCATED,
            f"the stream ended after {len(seen.tokens)} chunks, without [DONE] or a finish reason",
            now,
        )

    @staticmethod
    def _take(payload: str, now: float, seen: _Seen) -> RequestRecord | None:
        """The record, once ``payload`` ends the request; ``None`` while it goes on."""
        try:
            chunk = read_chunk(payload)
        except MalformedChunk as e:
            return seen.record(MALFORMED, str(e), now)
        if chunk.error is not None:
            return seen.record(SERVER_ERROR, f"the server reported: {chunk.error[:ERROR_TEXT]}", now)
        if chunk.done:
            return seen.record(OK, end_s=now)
        seen.take(chunk, now)
        return None
