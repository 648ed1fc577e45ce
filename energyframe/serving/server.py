"""The server under load: how every request is sent to it, the check that it answers before
anything is measured, and a load sent to it (or a warm-up, unmeasured)."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ServerError, UsageError
from .client import ENDPOINTS, OK, RequestRecord, StreamingClient
from .load import LoadPlan, LoadResult, run_load
from .prompts import Prompt
from .summary import failure_counts

log = logging.getLogger("energyframe")

#: how long the check that the server is there may take. Units: s.
CHECK_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ServerSettings:
    """How every request is sent.

    Args:
        url: the server's OpenAI base URL.
        model: the ``model`` field (``None``: the first the server lists).
        endpoint: ``chat`` or ``completions``.
        request_timeout_s: the longest one request may take. Units: s.
        stream_usage: ask for ``usage`` in the stream (``stream_options``).
        extra_body: fields added to every request.
    """

    url: str
    model: str | None = None
    endpoint: str = "chat"
    request_timeout_s: float = 300.0
    stream_usage: bool = True
    extra_body: Mapping[str, Any] | None = None

    def checked(self) -> ServerSettings:
        if not self.url.startswith(("http://", "https://")):
            raise UsageError(f"--url {self.url!r}: give the server's base URL, e.g. http://127.0.0.1:8000/v1")
        if self.endpoint not in ENDPOINTS:
            raise UsageError(f"unknown endpoint {self.endpoint!r}. Available: {', '.join(ENDPOINTS)}")
        if not (self.request_timeout_s > 0 and math.isfinite(self.request_timeout_s)):
            raise UsageError(
                f"--request-timeout must be a number of seconds above 0, got {self.request_timeout_s!r}"
            )
        return self


def http_client(timeout_s: float):
    """The HTTP client: direct to the server (no proxy from the environment: the server runs
    on the machine being measured), no limit on connections (a pool limit would queue
    requests in the client and misplace their send)."""
    import httpx

    return httpx.AsyncClient(
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
        timeout=httpx.Timeout(connect=min(CHECK_TIMEOUT_S, timeout_s), read=None, write=None, pool=None),
        trust_env=False,
    )


async def check_server(server: ServerSettings) -> str:
    """The model to ask for, once the server answers at ``url/models``.

    Raises:
        ServerError: nothing answers there.
        UsageError: no ``model`` given and the server lists none.
    """
    return _chosen_model(server, await _listed_models(server))


async def _listed_models(server: ServerSettings) -> list[str]:
    """The models the server lists at ``url/models``; none where it answers otherwise.

    Raises:
        ServerError: nothing answers there, or not in time.
    """
    import httpx

    async with http_client(CHECK_TIMEOUT_S) as http:
        try:
            response = await asyncio.wait_for(http.get(server.url.rstrip("/") + "/models"), CHECK_TIMEOUT_S)
        except (httpx.ConnectError, httpx.ConnectTimeout) as e:
            raise ServerError(
                f"no server answers at {server.url} ({e or type(e).__name__}); start it first, or check --url"
            ) from e
        except (asyncio.TimeoutError, httpx.TimeoutException) as e:
            raise ServerError(
                f"the server at {server.url} did not answer within {CHECK_TIMEOUT_S:g} s"
            ) from e
        except httpx.HTTPError as e:
            raise ServerError(f"the server at {server.url} could not be asked for its models: {e}") from e
        if response.status_code != 200:
            return []
        try:
            return [
                str(m["id"]) for m in response.json().get("data", []) if isinstance(m, dict) and "id" in m
            ]
        except (ValueError, AttributeError):
            return []


def _chosen_model(server: ServerSettings, names: list[str]) -> str:
    """The ``model`` given (said when the server lists others), else the first the server lists."""
    if server.model:
        if names and server.model not in names:
            log.warning(
                "warning: the server lists %s, not %r; asking for %r anyway",
                ", ".join(names),
                server.model,
                server.model,
            )
        return server.model
    if not names:
        raise UsageError(f"give --model NAME: the server at {server.url} lists no model at /models")
    if len(names) > 1:
        log.info("the server lists %s; measuring %s (give --model to choose)", ", ".join(names), names[0])
    return names[0]


async def send_load(
    server: ServerSettings,
    model: str,
    prompts: Sequence[Prompt],
    plan: LoadPlan,
    progress_s: float | None = None,
) -> LoadResult:
    """Send every prompt as planned; with ``progress_s``, say how far the load is that often."""
    ended = [0]

    async def say() -> None:
        while True:
            await asyncio.sleep(progress_s or math.inf)
            log.info("%d of %d requests ended", ended[0], len(prompts))

    async with http_client(server.request_timeout_s) as http:
        client = StreamingClient(
            http,
            server.url,
            model,
            server.endpoint,
            server.request_timeout_s,
            server.stream_usage,
            server.extra_body,
        )

        async def send(prompt: Prompt, due: float, ready: float) -> RequestRecord:
            record = await client.send(prompt, due, ready)
            ended[0] += 1
            return record

        ticker = asyncio.ensure_future(say()) if progress_s else None
        try:
            return await run_load(prompts, plan, send)
        finally:
            if ticker is not None:
                ticker.cancel()


def warm_up(server: ServerSettings, model: str, prompts: Sequence[Prompt], n: int) -> None:
    """Send ``n`` of the prompts one after the other, unmeasured (compiled kernels, caches)."""
    if n <= 0:
        return
    chosen = [prompts[i % len(prompts)] for i in range(n)]
    log.info("warming up the server with %d request(s)", n)
    result = asyncio.run(send_load(server, model, chosen, LoadPlan((0.0,) * n, concurrency=1)))
    failed = [r for r in result.records if r.status != OK]
    if failed:
        log.warning(
            "warning: %d of %d warm-up requests failed (%s); first: %s",
            len(failed),
            n,
            failure_counts(failed),
            failed[0].error,
        )
