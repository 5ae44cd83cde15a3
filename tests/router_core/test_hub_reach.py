"""The hub is probed once: unreachable turns on huggingface_hub's offline mode, so a
tokenizer lookup fails at once instead of after ~24 s of retries; an operator's
HF_HUB_OFFLINE is left as set. The 'hub' here is a local port (real sockets, no mock)."""

from __future__ import annotations

import socket

import pytest
from huggingface_hub import constants, hf_hub_download

from router_core.env.hub_reach import hub_offline_if_unreachable
from router_core.env.litellm_env import litellm


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)

    def at(url: str) -> None:
        monkeypatch.setattr(constants, "ENDPOINT", url)

    return at


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_hub_turns_offline_mode_on(hub) -> None:
    hub(f"http://127.0.0.1:{_closed_port()}")
    assert hub_offline_if_unreachable(timeout_s=1.0) is True
    assert constants.HF_HUB_OFFLINE is True
    with socket.socket() as server:  # a hub that would answer: offline mode never calls it
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        hub(f"http://127.0.0.1:{server.getsockname()[1]}")
        with pytest.raises(Exception, match="(?i)offline|local cache"):
            hf_hub_download("Xenova/llama-3-tokenizer", "tokenizer.json")
        with pytest.raises(BlockingIOError):
            server.accept()  # no connection was made
    # a Llama backend's tokenizer: litellm falls back to tiktoken and still counts
    assert litellm.token_counter(model="deepinfra/meta-llama/Meta-Llama-3.1-8B-Instruct",
                                 text="hello world how are you") > 0


def test_reachable_hub_changes_nothing(hub) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        hub(f"http://127.0.0.1:{server.getsockname()[1]}")
        assert hub_offline_if_unreachable(timeout_s=1.0) is False
    assert constants.HF_HUB_OFFLINE is False


def test_the_operators_setting_is_kept(hub, monkeypatch: pytest.MonkeyPatch) -> None:
    hub(f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # explicitly online: never probed or changed
    assert hub_offline_if_unreachable(timeout_s=1.0) is False
    assert constants.HF_HUB_OFFLINE is False
