"""Server-sent events as an OpenAI-compatible server streams them, read line by line.

An event is its ``data:`` lines (joined by newlines) up to a blank line; comments (``:``) and the
other fields (``event:``, ``id:``, ``retry:``) are skipped. What a payload says about a request
(a token, the end, the usage, an error) is ``read_chunk``'s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

#: the payload that ends an OpenAI stream
DONE = "[DONE]"


class SSEParser:
    """Turns lines into event payloads: ``feed`` each line, ``close`` at the end of the stream."""

    def __init__(self) -> None:
        self._data: list[str] = []

    def feed(self, line: str) -> list[str]:
        """The payloads this line completes (a blank line ends an event)."""
        line = line.rstrip("\r\n")
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return []
        name, _, value = line.partition(":")
        if name == "data":
            self._data.append(value[1:] if value.startswith(" ") else value)
        return []

    def close(self) -> list[str]:
        """An event the stream ended inside (no blank line after it)."""
        return self._dispatch()

    def _dispatch(self) -> list[str]:
        if not self._data:
            return []
        payload, self._data = "\n".join(self._data), []
        return [payload]


class MalformedChunk(ValueError):
    """A payload that is not the JSON of a completion chunk."""


@dataclass(frozen=True)
class Chunk:
    """What one payload says.

    Args:
        done: it is ``[DONE]``.
        text: generated text (a token or a few); empty for a role-only or final chunk.
        finish_reason: ``stop``, ``length``... on the chunk that ends the choice.
        prompt_tokens, output_tokens: the server's ``usage``, where it reports it.
        error: the server's error message, for an error event inside the stream.
    """

    done: bool = False
    text: str = ""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    error: str | None = None


def read_chunk(payload: str) -> Chunk:
    """One payload of a chat or completions stream.

    Raises:
        MalformedChunk: not JSON, or not an object.
    """
    if payload.strip() == DONE:
        return Chunk(done=True)
    data = _json_object(payload)
    if data.get("error") is not None:
        return Chunk(error=_error_message(data["error"]))
    text, finish = _first_choice(data.get("choices") or [])
    usage: dict[str, Any] = data["usage"] if isinstance(data.get("usage"), dict) else {}
    return Chunk(
        text=text,
        finish_reason=finish,
        prompt_tokens=_count(usage.get("prompt_tokens")),
        output_tokens=_count(usage.get("completion_tokens")),
    )


def _json_object(payload: str) -> dict[str, Any]:
    try:
        data = json.loads(payload)
    except json.JSONDecodeError as e:
        raise MalformedChunk(f"unreadable SSE data {payload[:80]!r} ({e.msg})") from e
    if not isinstance(data, dict):
        raise MalformedChunk(f"SSE data {payload[:80]!r} is not a JSON object")
    return data


def _error_message(error: Any) -> str:
    """An error event's message: the object's ``message``, or whatever the server sent."""
    message = error.get("message", error) if isinstance(error, dict) else error
    return str(message)


def _first_choice(choices: Any) -> tuple[str, str | None]:
    """The first choice's generated text (a completion's ``text``, a chat delta's content and
    reasoning content) and finish reason; nothing for a chunk without choices."""
    if not (isinstance(choices, list) and choices and isinstance(choices[0], dict)):
        return "", None
    choice = choices[0]
    delta: dict[str, Any] = choice["delta"] if isinstance(choice.get("delta"), dict) else {}
    text = "".join(
        part
        for part in (choice.get("text"), delta.get("content"), delta.get("reasoning_content"))
        if isinstance(part, str)
    )
    finish = choice.get("finish_reason") if isinstance(choice.get("finish_reason"), str) else None
    return text, finish


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
