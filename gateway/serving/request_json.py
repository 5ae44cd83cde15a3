"""The upstream request body as JSON bytes, with orjson, for the openai SDK that litellm calls.

Why: the SDK serialises every request body with ``json.dumps(..., ensure_ascii=False)``
then ``.encode()`` on the event loop; for an 8 MB prompt that is one C call holding the GIL
for 30-60 ms (measured with bench/hostile.py's loop-stall scenario: the largest stall left),
and a worker thread would not help, since the GIL is held throughout. orjson writes the same
bytes about ten times faster (an 8 MB ASCII prompt: ~5 ms), small bodies faster too.

The same JSON: compact separators, UTF-8 (no ``\\u`` escapes), pydantic models dumped as the
SDK dumps them (``exclude_unset``, JSON mode, by alias), datetimes in ISO format; only a float
may be spelled differently (``1e-05`` as ``0.00001``: the same number). Anything
orjson refuses (a lone surrogate, a non-string key, an integer past 64 bits, an unknown type)
goes to the SDK's own serialiser, which raises or writes what it always did. One difference:
orjson writes NaN as ``null`` where the SDK raises; request validation
(gateway/serving/validation.py) refuses non-finite numbers before any upstream call.

``install`` replaces the name the SDK's base client looks up (``openapi_dumps`` in
``openai._base_client``); it is a no-op when that name is not there (another SDK version).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pydantic

_sdk_dumps: Callable[[Any], bytes] | None = None


def _default(value: Any) -> Any:
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(exclude_unset=True, mode="json", by_alias=True)
    raise TypeError(f"not serialisable here: {type(value).__name__}")


def request_json(obj: Any) -> bytes:
    """``obj`` as the SDK would send it (module docstring)."""
    try:
        return orjson.dumps(obj, default=_default)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        if _sdk_dumps is None:
            raise
        return _sdk_dumps(obj)


def install() -> bool:
    """Make the openai SDK serialise request bodies with ``request_json``; whether it did."""
    global _sdk_dumps
    try:
        from openai import _base_client
    except ImportError:
        return False
    current = getattr(_base_client, "openapi_dumps", None)
    if current is None:
        return False
    if current is not request_json:
        _sdk_dumps = current
        _base_client.openapi_dumps = request_json  # type: ignore[attr-defined]
    return True
