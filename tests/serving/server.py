"""A small real OpenAI-compatible streaming server for the serving tests: HTTP/1.1 on asyncio
(standard library), in a thread of its own, with token timing and faults under control.

Each request's behaviour comes from the server's defaults, overridden by words of the prompt
such as ``@tokens=5 @ttft=0.05 @gap=0.01 @fault=stall``:

- ``tokens``: chunks of text sent (default: the request's max_tokens, else 8);
- ``ttft``: seconds before the first; ``gap``: seconds between the next ones;
- ``work``: seconds of the server's ``work`` (e.g. GPU kernels) run before the first token, in
  the server's loop (as a real server's step: every stream waits for it);
- ``first_at``: the first token at this Unix time (instead of ``ttft``); ``until``: tokens every
  ``gap`` until this Unix time (instead of ``tokens``);
- ``fault``: ``http500`` / ``http429`` (that status, no stream), ``stall`` (two tokens, then
  nothing, the connection kept open), ``close`` (two tokens, then the connection dropped),
  ``end`` (two tokens, then a clean end without a finish reason or [DONE]), ``malformed``
  (two tokens, then data that is not JSON), ``error`` (two tokens, then an error event),
  ``nousage`` (no usage chunk).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

DIRECTIVE = re.compile(r"@(\w+)=(\S+)")


@dataclass
class Received:
    """A request the server read: its body and when (this host's monotonic clock)."""

    path: str
    body: dict
    at_s: float
    tokens_sent: list[float] = field(default_factory=list)


class FakeServer:
    """``with FakeServer() as server: server.url`` (``http://127.0.0.1:PORT/v1``).

    Args:
        model: the one model it lists and serves.
        ttft_s, gap_s: default time to the first token and between tokens. Units: s.
        refuse_stream_options: answer 422 to a request with ``stream_options`` (as
            ``transformers serve`` does).
        usage: ``asked`` (a usage chunk where the request asked), ``always``, or ``never``.
        done: end streams with ``data: [DONE]`` (``transformers serve`` does not).
        down_after: stop listening (the server is down) once this many streams have ended.
        work: what ``@work=SECONDS`` runs, given the seconds.
    """

    def __init__(
        self,
        model: str = "tiny",
        ttft_s: float = 0.02,
        gap_s: float = 0.005,
        refuse_stream_options: bool = False,
        usage: str = "asked",
        done: bool = True,
        down_after: int | None = None,
        work: Callable[[float], None] | None = None,
    ) -> None:
        self.model, self.ttft_s, self.gap_s = model, ttft_s, gap_s
        self.refuse_stream_options, self.usage, self.done = refuse_stream_options, usage, done
        self.received: list[Received] = []
        self.down_after, self.answered = down_after, 0
        self.work = work
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="fake-openai-server")
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task] = set()
        self.port = 0

    # -- life ----------------------------------------------------------------------------------
    def __enter__(self) -> FakeServer:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._connection, "127.0.0.1", self.port), self._loop
        ).result(5)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def stop(self) -> None:
        """Stop listening and drop every connection: the server is down."""
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._down(), self._loop).result(5)

    async def _down(self, keep: asyncio.Task | None = None) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        others = [t for t in self._tasks if t is not keep]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # -- HTTP ----------------------------------------------------------------------------------
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {
                    k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)
                }
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if not await self._answer(method, path, body, writer):
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            return
        finally:
            self._writers.discard(writer)
            self._tasks.discard(task)
            writer.close()

    @staticmethod
    async def _json(writer: asyncio.StreamWriter, status: int, payload: object) -> None:
        data = json.dumps(payload).encode()
        writer.write(
            f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode()
            + data
        )
        await writer.drain()

    async def _answer(self, method: str, path: str, raw: bytes, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection must end."""
        if method == "GET" and path == "/v1/models":
            await self._json(writer, 200, {"object": "list", "data": [{"id": self.model, "object": "model"}]})
            return True
        if method == "GET" and path == "/health":
            await self._json(writer, 200, {"status": "ok"})
            return True
        if method != "POST" or path not in ("/v1/chat/completions", "/v1/completions"):
            await self._json(writer, 404, {"error": {"message": f"no {method} {path}"}})
            return True
        body = json.loads(raw)
        received = Received(path, body, time.monotonic())
        self.received.append(received)
        if self.refuse_stream_options and "stream_options" in body:
            await self._json(writer, 422, {"detail": "Unsupported fields in the request: {'stream_options'}"})
            return True
        return await self._stream(body, path.endswith("chat/completions"), received, writer)

    def _behaviour(self, body: dict) -> dict:
        text = body.get("prompt") or " ".join(str(m.get("content", "")) for m in body.get("messages", []))
        given = dict(DIRECTIVE.findall(text))
        now = time.time()
        ttft = (
            max(0.0, float(given["first_at"]) - now)
            if "first_at" in given
            else float(given.get("ttft", self.ttft_s))
        )
        gap = float(given.get("gap", self.gap_s))
        tokens = int(given.get("tokens", body.get("max_tokens") or 8))
        if "until" in given:
            tokens = max(1, int((float(given["until"]) - now - ttft) / gap) + 1)
        return {
            "tokens": tokens,
            "ttft": ttft,
            "gap": gap,
            "fault": given.get("fault", ""),
            "work": float(given.get("work", 0.0)),
            "prompt_tokens": len(text.split()),
        }

    async def _stream(self, body: dict, chat: bool, received: Received, writer: asyncio.StreamWriter) -> bool:
        b = self._behaviour(body)
        fault = b["fault"]
        if fault.startswith("http"):
            await self._json(writer, int(fault[4:]), {"error": {"message": f"injected {fault}"}})
            return True
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        )

        async def send(payload: str) -> None:
            data = f"data: {payload}\n\n".encode()
            writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            await writer.drain()

        def chunk(text: str | None = None, finish: str | None = None, usage: dict | None = None) -> str:
            if chat:
                choice = {
                    "index": 0,
                    "delta": {"content": text} if text is not None else {},
                    "finish_reason": finish,
                }
            else:
                choice = {"index": 0, "text": text or "", "finish_reason": finish}
            return json.dumps(
                {"id": "x", "object": "chunk", "choices": [choice] if usage is None else [], "usage": usage}
            )

        if chat:
            await send(json.dumps({"id": "x", "choices": [{"index": 0, "delta": {"role": "assistant"}}]}))
        n = b["tokens"] if not fault or fault == "nousage" else 2
        if b["work"] and self.work is not None:
            self.work(b["work"])
        for k in range(n):
            await asyncio.sleep(b["ttft"] if k == 0 else b["gap"])
            await send(chunk(f" w{k}"))
            received.tokens_sent.append(time.monotonic())
        if fault == "stall":
            await asyncio.sleep(3600)
        if fault == "close":
            writer.transport.abort()
            return False
        if fault == "malformed":
            await send("{not json")
        elif fault == "error":
            await send(json.dumps({"error": {"message": "injected error event"}}))
        elif fault != "end":
            await send(chunk("", "length"))
            asked = bool((body.get("stream_options") or {}).get("include_usage"))
            if fault != "nousage" and (self.usage == "always" or (self.usage == "asked" and asked)):
                usage = {
                    "prompt_tokens": b["prompt_tokens"],
                    "completion_tokens": n,
                    "total_tokens": b["prompt_tokens"] + n,
                }
                await send(chunk(usage=usage))
            if self.done:
                await send("[DONE]")
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        self.answered += 1
        if self.answered == self.down_after:
            await self._down(keep=asyncio.current_task())
            return False
        return True
