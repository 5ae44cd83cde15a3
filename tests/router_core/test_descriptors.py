"""Descriptor kinds: unit vectors of one dimension, on the probe set, pluggable by name."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest

from router_core.data.table import RoutingTable
from router_core.descriptors import (
    DescriptorKind,
    ProbeOutcome,
    ProbeSet,
    get_kind,
    known_kinds,
    unit_rows,
)


def _table(n: int = 40, m: int = 4, seed: int = 0) -> RoutingTable:
    rng = np.random.default_rng(seed)
    quality = (rng.random((n, m)) < np.linspace(0.3, 0.9, m)).astype(float)
    quality[3, 1] = np.nan
    return RoutingTable(
        name="toy",
        prompt_ids=np.array([f"p{i}" for i in range(n)], dtype=object),
        prompts=np.array([f"prompt {i}" for i in range(n)], dtype=object),
        models=tuple(f"m{j}" for j in range(m)),
        quality=quality,
        cost=np.tile(np.linspace(0.1, 1.0, m), (n, 1)),
        split=np.array(["train"] * n, dtype=object),
        category=np.array(["a", "b"] * (n // 2), dtype=object),
    )


def test_unit_rows_centre_scale_and_norm():
    raw = np.array([[1.0, 0.0, 1.0, 1.0], [2.0, 4.0, 6.0, 8.0], [1.0, 1.0, 1.0, 1.0]])
    e = unit_rows(raw)
    assert e.shape == raw.shape and e.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(e[:2].sum(axis=1), 0.0, atol=1e-6)  # centred rows
    # an affine change of a model's raw scale does not move its descriptor
    np.testing.assert_allclose(unit_rows(3 * raw[1:2] + 5), e[1:2], atol=1e-6)
    # a constant row (right on every probe) still gets a unit vector
    np.testing.assert_allclose(np.linalg.norm(e[2]), 1.0, atol=1e-6)


def test_probe_outcome_descriptors_are_unit_vectors_on_the_probes():
    table = _table()
    probes = ProbeSet.sample(table, n=10, seed=1)
    assert len(probes) == 10 and len(set(probes.ids)) == 10
    cats = {table.category[list(table.prompt_ids).index(p)] for p in probes.ids}
    assert cats == {"a", "b"}  # stratified by category
    kind = ProbeOutcome()
    e = kind.describe(table, probes, table.models)
    assert e.shape == (table.n_models, kind.dim(probes)) == (4, 10)
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-6)
    raw = kind.raw(table, probes, table.models)
    pos = [list(table.prompt_ids).index(p) for p in probes.ids]
    np.testing.assert_array_equal(np.isnan(raw[1]), np.isnan(table.quality[pos, 1]))
    level = kind.level(table, probes, table.models)
    np.testing.assert_allclose(level, np.nanmean(table.quality[pos], axis=0))


def test_probe_set_round_trips_through_json_and_is_seeded():
    table = _table()
    a, b = ProbeSet.sample(table, 8, seed=3), ProbeSet.sample(table, 8, seed=3)
    assert a == b and ProbeSet.from_json(a.to_json()) == a
    assert ProbeSet.sample(table, 8, seed=4) != a


def test_probe_outcome_needs_rows_for_every_probe():
    table = _table()
    bad = ProbeSet(ids=("p0", "nope"), prompts=("x", "y"))
    with pytest.raises(ValueError, match="no rows"):
        ProbeOutcome().raw(table, bad, table.models)


def test_probe_outcome_on_a_table_without_rows_is_empty_not_a_crash():
    """A quick run can leave a split without rows (bench.routing.promise --quick on
    MMLU-Pro): an empty column index was float, and np.bincount refused it."""
    table = _table()
    empty = table.rows(np.zeros(len(table.prompt_ids), dtype=bool))
    raw = ProbeOutcome().raw(empty, ProbeSet(ids=(), prompts=()), table.models)
    assert raw.shape == (table.n_models, 0)


def test_a_new_kind_is_found_by_name_without_registration():
    class Constant(DescriptorKind):
        name: ClassVar[str] = "test-constant"

        def raw(self, source, probes, models):
            return np.arange(len(models) * len(probes), dtype=float).reshape(len(models), -1)

    assert "probe-outcome" in known_kinds()
    assert get_kind("test-constant") is Constant
    with pytest.raises(KeyError):
        get_kind("no-such-kind")
