"""A body of very many objects is parsed by Python's own JSON scanner, which gives the GIL
back (gateway/serving/request/validation.py ``MANY_OBJECTS``): orjson held it for a whole 4.7 MB
parse of 15,000 tools, and with it the event loop. The same body, the same refusals."""

from __future__ import annotations

import gc

import orjson
import pytest

from gateway.errors import GatewayError
from gateway.serving.request import validation
from gateway.serving.request.validation import MANY_OBJECTS, load_json

MANY = [{"k": i, "v": [1.5, None, True, "é"]} for i in range(MANY_OBJECTS + 1)]


def test_a_body_of_many_objects_takes_the_yielding_parser_and_parses_the_same(
        monkeypatch: pytest.MonkeyPatch) -> None:
    raw = orjson.dumps({"model": "m", "metadata": {"items": MANY}})
    used: list[str] = []
    for name in ("_loads_fast", "_loads_yielding"):
        real = getattr(validation, name)
        monkeypatch.setattr(validation, name,
                            lambda r, real=real, name=name: (used.append(name), real(r))[1])
    assert load_json(raw) == orjson.loads(raw)
    assert used == ["_loads_yielding"]
    load_json(b'{"model": "m"}')
    assert used[-1] == "_loads_fast"


@pytest.mark.parametrize("tail", [b'NaN', b'1e999', b'"\\ud800"', b'"\xff"', b'[' * 5000],
                         ids=["nan", "infinite", "lone_surrogate", "not_utf8", "deep"])
def test_the_yielding_parser_refuses_what_orjson_refuses(tail: bytes) -> None:
    raw = orjson.dumps({"items": MANY})[:-1] + b', "x": ' + tail + b"}"
    with pytest.raises(GatewayError) as exc:
        load_json(raw)
    assert exc.value.status == 400


def test_a_refused_body_is_freed_where_it_was_parsed() -> None:
    """The 400 for 15,000 tools does not carry the parsed body out of the worker thread (the
    checks' frames in its traceback held it, in a cycle only a full collection freed: ~60,000
    objects, issue 35). Counted with the collector off, so nothing frees a cycle meanwhile."""
    tools = [{"type": "function", "function": {
        "name": f"lookup_{i}", "parameters": {"type": "object", "properties": {
            "q": {"type": "string"}, "limit": {"type": "integer"}}}}} for i in range(15_000)]
    raw = orjson.dumps({"model": "m", "tools": tools,
                        "messages": [{"role": "user", "content": "hi"}]})
    del tools
    gc.collect()
    gc.disable()
    try:
        before = len(gc.get_objects())
        with pytest.raises(GatewayError) as exc:
            load_json(raw, 2048, 4096, 8192)
        kept = len(gc.get_objects()) - before
    finally:
        gc.enable()
    assert exc.value.status == 400 and exc.value.body()["error"]["param"] == "tools"
    assert kept < 1_000, kept  # the error, its traceback and the frames: not the body
