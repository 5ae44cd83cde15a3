"""The fake OpenAI-compatible upstream every HTTP test starts on 127.0.0.1.

The implementation ships in the package (``gateway.sandbox.local_upstream``) because ``tollgate demo``
serves recorded benchmark answers with it; tests import it from here::

    from tests.fakes.upstream import FakeBackend, FakeUpstream

    with FakeUpstream([FakeBackend("fake-a", reply="hi"), FakeBackend("fake-b")]) as up:
        up.model_entry("fake-a")                # a config.yaml model_list entry for it
        up.set_mode("fake-b", "hang", times=1)  # 500, 429, hang, reset, stall, malformed JSON
        up.streams                              # StreamEnd: "peer_closed" = caller hung up
"""

from gateway.sandbox.local_upstream import (
    MODES,
    FakeBackend,
    FakeUpstream,
    StreamEnd,
    count_prompt_tokens,
)

__all__ = ["MODES", "FakeBackend", "FakeUpstream", "StreamEnd", "count_prompt_tokens"]
