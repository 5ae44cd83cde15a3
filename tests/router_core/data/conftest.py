"""Shared fixtures: the real benchmark tables, loaded once per test session."""

from __future__ import annotations

import pytest

from router_core.data import load_dataset


@pytest.fixture(scope="session")
def routerbench():
    return load_dataset("routerbench")


@pytest.fixture(scope="session")
def mmlu_pro():
    return load_dataset("mmlu-pro")


@pytest.fixture(scope="session")
def llmrouter():
    return load_dataset("llmrouter")
