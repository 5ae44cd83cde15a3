"""The litellm internals the gateway touches: the tested release is the locked one, an
untested one is named, and each internal's absence takes the public path.

The absences are simulated (attributes removed with monkeypatch): only one litellm release
can be installed here, and these tests are what says the fallbacks work on another.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gateway.provider import litellm_compat

ROOT = Path(__file__).resolve().parents[3]


def test_the_tested_release_is_the_locked_one() -> None:
    pinned = re.search(r"^litellm==(\S+)", (ROOT / "requirements.lock").read_text(), re.MULTILINE)
    assert pinned and pinned.group(1) == litellm_compat.TESTED_LITELLM
    assert litellm_compat.installed_version() == litellm_compat.TESTED_LITELLM
    assert litellm_compat.missing() == []
    assert litellm_compat.startup_lines() == [f"{litellm_compat.TESTED_LITELLM} (the tested release)"]


def test_an_untested_release_is_named_with_what_it_lacks() -> None:
    lines = litellm_compat.startup_lines("9.9.9", [("litellm.main.completion", "pool")])
    assert lines[0].startswith(f"9.9.9: untested (tested with {litellm_compat.TESTED_LITELLM}")
    assert lines[1] == "litellm.main.completion missing: pool"


def test_every_internal_is_probed(monkeypatch: pytest.MonkeyPatch) -> None:
    import litellm._internal_context as ctx

    assert litellm_compat.has("litellm._internal_context.internal_sub_call")
    monkeypatch.delattr(ctx, "internal_sub_call")
    assert not litellm_compat.has("litellm._internal_context.internal_sub_call")
    assert [n for n, _ in litellm_compat.missing()] == [
        "litellm._internal_context.internal_sub_call"]


def test_without_the_shared_http_client_litellm_builds_its_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from litellm.llms.openai import common_utils

    from gateway.provider import request_json

    call = {"model": "openai/gpt-4o-mini", "api_key": "sk-x", "api_base": "http://127.0.0.1:9/v1"}

    async def client():
        return request_json.sdk_client(call)

    assert asyncio.run(client()) is not None
    monkeypatch.delattr(common_utils.BaseOpenAILLM, "get_async_http_client")
    request_json._clients.clear()
    assert asyncio.run(client()) is None  # litellm's own path


def test_without_litellms_logging_setup_a_callback_is_handed_over_unchecked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from litellm.litellm_core_utils import litellm_logging

    from gateway.provider import litellm_callbacks

    litellm_callbacks.unusable.cache_clear()
    monkeypatch.delattr(litellm_logging, "set_callbacks")
    try:
        assert litellm_callbacks.unusable("langfuse") is None
    finally:
        litellm_callbacks.unusable.cache_clear()

