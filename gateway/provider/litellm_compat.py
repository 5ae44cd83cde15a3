"""The litellm internals the gateway touches, checked against the release it was tested with.

Why: litellm's private modules change without notice between releases, and an unpinned
install takes whatever is newest (requirements.lock pins the tested one; a user installing the
package into their own environment may still get another). Each internal the gateway reaches
into has a public-API path it falls back to when the internal is gone, so an untested release
still serves; ``startup_line`` names the release in the startup block when it is not the
tested one, with each internal it lacks and what the gateway does instead.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

# requirements.lock's litellm pin (tests/gateway/test_litellm_compat.py keeps the two equal)
TESTED_LITELLM = "1.110.2"


def _attr(module: str, *names: str) -> Callable[[], bool]:
    """A probe: ``module`` imports and has the attribute path ``names``."""
    def probe() -> bool:
        try:
            obj = importlib.import_module(module)
        except ImportError:
            return False
        for name in names:
            obj = getattr(obj, name, None)
            if obj is None:
                return False
        return True
    return probe


# (internal, where the gateway uses it, probe, what the gateway does without it)
INTERNALS: tuple[tuple[str, str, Callable[[], bool], str], ...] = (
    ("litellm._internal_context.internal_sub_call", "gateway/provider/litellm_unlogged.py",
     _attr("litellm._internal_context", "internal_sub_call"),
     "litellm logs every call itself (11% more CPU per call)"),
    ("litellm.main.completion", "gateway/provider/litellm_inline.py",
     _attr("litellm.main", "completion"),
     "litellm's call setup stays on its thread pool"),
    ("litellm.llms.openai.common_utils.BaseOpenAILLM.get_async_http_client",
     "gateway/provider/request_json.py",
     _attr("litellm.llms.openai.common_utils", "BaseOpenAILLM", "get_async_http_client"),
     "litellm builds its own OpenAI client per call"),
    ("litellm.litellm_core_utils.litellm_logging.set_callbacks", "gateway/provider/litellm_callbacks.py",
     _attr("litellm.litellm_core_utils.litellm_logging", "set_callbacks"),
     "named callbacks are handed to litellm unchecked"),
)


def has(internal: str) -> bool:
    """Whether the installed litellm has ``internal`` (one of ``INTERNALS``)."""
    return next(probe for name, _, probe, _ in INTERNALS if name == internal)()


def installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("litellm")
    except PackageNotFoundError:
        return "unknown"


def missing() -> list[tuple[str, str]]:
    """(internal, what the gateway does instead) for each internal the installed litellm lacks."""
    return [(name, instead) for name, _, probe, instead in INTERNALS if not probe()]


def startup_lines(version: str | None = None, lacking: list[tuple[str, str]] | None = None
                  ) -> list[str]:
    """The startup block's ``litellm`` lines: the release, whether it is the tested one, and
    each internal it lacks with the public path taken instead."""
    version = installed_version() if version is None else version
    lacking = missing() if lacking is None else lacking
    if version == TESTED_LITELLM and not lacking:
        return [f"{version} (the tested release)"]
    head = (f"{version} (the tested release)" if version == TESTED_LITELLM else
            f"{version}: untested (tested with {TESTED_LITELLM}, requirements.lock; "
            f"scripts/install.sh installs it)")
    return [head] + [f"{name} missing: {instead}" for name, instead in lacking]
