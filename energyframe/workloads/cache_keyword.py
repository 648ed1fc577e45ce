"""Which keyword argument of a transformers module takes the key/value cache.

transformers has renamed it from release to release (``layer_past``, ``past_key_value``,
``past_key_values``, and since 5.x ``cache``), often with a deprecation shim that accepts the old
name for a while and then drops it. A list of names breaks with the next rename, so the keyword is
found by what it does: each candidate is passed a fresh cache that notes its writes, and the one
whose object the module writes keys and values into (``update``) is the cache argument. Candidates are
tried in the order most likely to be right first (annotated as a cache, then named like one), so
a module called with the right keyword costs one probing call.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ..errors import WorkloadError

_NAMED = inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY


def _watched(cache: Any) -> list[bool]:
    """Make ``cache`` note its writes; returns the flag that ``update`` sets.

    The cache's own ``update`` is wrapped on the instance, so ``isinstance`` checks that
    transformers makes on a cache still see the real class."""
    written = [False]
    update = cache.update

    def noting(*args: Any, **kwargs: Any) -> Any:
        written[0] = True
        return update(*args, **kwargs)

    cache.update = noting
    return written


def _likelihood(parameter: inspect.Parameter) -> int:
    """0 for a parameter annotated as a cache, 1 for one named like one, 2 for the rest."""
    if "cache" in str(parameter.annotation).lower() and "use_cache" != parameter.name:
        return 0
    if any(word in parameter.name.lower() for word in ("cache", "past")) and parameter.name != "use_cache":
        return 1
    return 2


def candidates(function: Callable[..., Any]) -> list[str]:
    """The keyword parameters of ``function`` (after the first, the input), likeliest first."""
    parameters = [p for p in inspect.signature(function).parameters.values() if p.kind in _NAMED]
    return [p.name for p in sorted(parameters[1:], key=_likelihood)]


def find_cache_keyword(
    function: Callable[..., Any], call: Callable[[str, Any], Any], make_cache: Callable[[], Any]
) -> str:
    """The keyword under which ``function`` takes its key/value cache.

    Args:
        function: the module's ``forward`` (its signature lists the candidates).
        call: runs the module once with ``{keyword: cache}`` added to its usual arguments.
        make_cache: a fresh, empty cache for each try (a try may have written into the last).

    Raises:
        WorkloadError: no keyword made the module write to the cache.
    """
    tried = candidates(function)
    for keyword in tried:
        cache = make_cache()
        written = _watched(cache)
        try:
            call(keyword, cache)
        except (TypeError, ValueError, AttributeError, RuntimeError, IndexError):
            pass  # most likely not an argument that takes a cache; a write below says otherwise
        if written[0]:
            return keyword
    owner = getattr(function, "__qualname__", repr(function))
    raise WorkloadError(
        f"{owner} wrote no key/value cache under any of its arguments ({', '.join(tried) or 'none'}); "
        "this transformers release may have changed how a layer takes its cache"
    )
