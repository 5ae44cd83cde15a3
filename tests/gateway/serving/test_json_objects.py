"""A body of very many objects is parsed by Python's own JSON scanner, which gives the GIL
back (gateway/serving/validation.py ``MANY_OBJECTS``): orjson held it for a whole 4.7 MB
parse of 15,000 tools, and with it the event loop. The same body, the same refusals."""

from __future__ import annotations

import orjson
import pytest

from gateway.errors import GatewayError
from gateway.serving import validation
from gateway.serving.validation import MANY_OBJECTS, load_json

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
