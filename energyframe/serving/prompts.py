"""What ``serve-bench`` sends: prompts from a synthetic spec or a JSONL file.

``synthetic:prompt_tokens=512,output_tokens=128`` makes prompts of common English words (about one
token each for the usual tokenizers; the server's ``usage`` gives the true count). A JSONL file
gives one request per line: ``{"prompt": "..."}`` or ``{"messages": [...]}``, and optionally
``max_tokens``, ``prompt_tokens``, ``id``, ``arrival_s`` (when to send it, from the load's start,
for an exact schedule) and ``extra`` (more fields of the request body).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..options import Option, parse_spec, resolve_options

SYNTHETIC = "synthetic"
SYNTHETIC_OPTIONS = (
    Option("prompt_tokens", "int", 512, "tokens in each prompt (about one per word)", minimum=1),
    Option("output_tokens", "int", 128, "tokens asked for (max_tokens)", minimum=1),
    Option("seed", "int", 0, "the words drawn; the same seed gives the same prompts"),
    Option(
        "same", "bool", False, "every request the same prompt (a server with a prefix cache prefills it once)"
    ),
)
#: the words of synthetic prompts: common, short, each one token for most tokenizers
WORDS = (
    "the of and to in is that it was for on are as with his they at be this from have or by one "
    "had not but what all were when we there can an your which their said if do will each about "
    "how up out them then she many some so these would other into has more her two like him see "
    "time could no make than first been its who now people my made over did down only way find use"
).split()
#: characters per token where neither the server nor the file says (the usual rule of thumb)
CHARS_PER_TOKEN = 4.0


@dataclass(frozen=True)
class Prompt:
    """One request to send.

    Args:
        request_id: its name in requests.csv (unique within the run).
        text: the prompt (completions endpoint) or the user's message (chat), when ``messages``
            is empty.
        messages: chat messages as the file gave them.
        max_tokens: the output tokens asked for (``None``: the server's default).
        prompt_tokens: the prompt's tokens as planned (synthetic), given by the file, or
            estimated from its characters; the server's ``usage`` replaces it.
        arrival_s: when to send it, from the load's start (a file's ``arrival_s``); ``None``
            follows ``--rate`` or ``--concurrency``. Units: s.
        extra: more fields of the request body.
    """

    request_id: str
    text: str = ""
    messages: Sequence[Mapping[str, Any]] = ()
    max_tokens: int | None = None
    prompt_tokens: int = 1
    arrival_s: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


def estimated_tokens(text: str) -> int:
    """A prompt's tokens from its length, where nothing better is known."""
    return max(1, round(len(text) / CHARS_PER_TOKEN))


def synthetic_prompts(options: Mapping[str, Any], n: int) -> list[Prompt]:
    """``n`` prompts of ``prompt_tokens`` words each, drawn with ``seed``."""
    rng = random.Random(options["seed"])
    size, out_tokens = int(options["prompt_tokens"]), int(options["output_tokens"])
    first = " ".join(rng.choice(WORDS) for _ in range(size))
    prompts = []
    for i in range(n):
        text = first if options["same"] or i == 0 else " ".join(rng.choice(WORDS) for _ in range(size))
        prompts.append(Prompt(f"r{i:05d}", text=text, max_tokens=out_tokens, prompt_tokens=size))
    return prompts


def load_prompts(source: str, requests: int | None) -> list[Prompt]:
    """The prompts of ``--prompts``: a ``synthetic:...`` spec or a JSONL file.

    Args:
        source: the spec or the file's path.
        requests: how many to send; ``None`` sends a file's lines once (a synthetic spec needs it).
            More than a file has repeats its lines in order (not with ``arrival_s``).

    Raises:
        UsageError: a bad spec, an unreadable file or line, naming it.
    """
    if source.split(":", 1)[0].strip() == SYNTHETIC:
        spec = parse_spec(source)
        options = resolve_options(SYNTHETIC_OPTIONS, spec.options, "--prompts synthetic")
        if requests is None:
            raise UsageError("--prompts synthetic:... needs --requests N (how many to send)")
        return synthetic_prompts(options, requests)
    path = Path(source)
    if not path.is_file():
        raise UsageError(
            f"--prompts {source!r}: no such file (give a JSONL file or synthetic:prompt_tokens=N,output_tokens=M)"
        )
    lines = read_jsonl(path)
    if requests is None:
        return lines
    if requests > len(lines) and any(p.arrival_s is not None for p in lines):
        raise UsageError(
            f"--requests {requests}: {path} has {len(lines)} lines with arrival_s; their times cannot repeat"
        )
    out = []
    for i in range(requests):
        p = lines[i % len(lines)]
        lap = i // len(lines)
        out.append(p if lap == 0 else replace(p, request_id=f"{p.request_id}.{lap}"))
    return out


def read_jsonl(path: Path) -> list[Prompt]:
    """Every line of a JSONL prompts file.

    Raises:
        UsageError: a line that is not an object with ``prompt`` or ``messages``, a bad field, two
            lines with one ``id``, or ``arrival_s`` on some lines only.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--prompts {path}: cannot read it ({e})") from e
    prompts: list[Prompt] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            prompts.append(_line(path, number, line, len(prompts)))
    if not prompts:
        raise UsageError(f"--prompts {path}: no prompts in it")
    _check_together(path, prompts)
    return prompts


def _check_together(path: Path, prompts: list[Prompt]) -> None:
    """What the lines must agree on: each its own id, and arrival times on all or none."""
    ids = [p.request_id for p in prompts]
    duplicate = next((i for i in ids if ids.count(i) > 1), None)
    if duplicate is not None:
        raise UsageError(f"--prompts {path}: id {duplicate!r} is on two lines; each request needs its own")
    timed = [p.arrival_s is not None for p in prompts]
    if any(timed) and not all(timed):
        raise UsageError(
            f"--prompts {path}: arrival_s is on {sum(timed)} of {len(prompts)} lines; give it on all or none"
        )


def _line(path: Path, number: int, line: str, index: int) -> Prompt:
    where = f"--prompts {path} line {number}"
    data = _json_object(where, line)
    text, messages = _prompt_or_messages(where, data)
    extra = data.get("extra", {})
    if not isinstance(extra, dict):
        raise UsageError(f'{where}: "extra" must be an object (more fields of the request body)')
    whole = text or " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
    return Prompt(
        request_id=str(data.get("id", f"r{index:05d}")),
        text=text,
        messages=tuple(messages),
        max_tokens=_number(data, "max_tokens", where, whole=True),
        prompt_tokens=_number(data, "prompt_tokens", where, whole=True) or estimated_tokens(whole),
        arrival_s=_number(data, "arrival_s", where, whole=False),
        extra=extra,
    )


def _json_object(where: str, line: str) -> dict[str, Any]:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as e:
        raise UsageError(f"{where}: not JSON ({e.msg})") from e
    if not isinstance(data, dict):
        raise UsageError(f"{where}: not a JSON object")
    return data


def _prompt_or_messages(where: str, data: Mapping[str, Any]) -> tuple[str, list]:
    """The line's ``prompt`` text and ``messages`` list; one of them must be given."""
    text, messages = data.get("prompt", ""), data.get("messages", [])
    if not isinstance(text, str) or not isinstance(messages, list) or not (text or messages):
        raise UsageError(f'{where}: give "prompt" (a string) or "messages" (a list)')
    return text, messages


def _number(data: Mapping[str, Any], key: str, where: str, whole: bool) -> Any:
    value = data.get(key)
    if value is None:
        return None
    ok = isinstance(value, int) if whole else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or not math.isfinite(value) or value < (1 if whole else 0):
        kind = "a whole number of at least 1" if whole else "a number of seconds of at least 0"
        raise UsageError(f"{where}: {key} must be {kind}, got {value!r}")
    return value
