"""Probe-outcome footprints: a model described by how well it did on the N probe prompts.

The UMR baseline's representation and CSCR's fallback when neither logits nor a scorer LM
are available. Coordinate j of model h is its mean observed quality on probe j (mean over
repeated samples); a probe a model was not observed on takes the model's mean. Rows are
then mean-centred, scaled to unit variance and ℓ2-normalised (``DescriptorKind.normalise``),
so e_h says *where* h is strong relative to its own average, and the calibration carries
its overall level.

Example::

    kind = ProbeOutcome()
    E = kind.describe(table, probes, table.models)   # (m, N) unit rows
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from router_core.data.table import RoutingTable
from router_core.descriptors.base import DescriptorKind, ProbeSet


class ProbeOutcome(DescriptorKind):
    """e_h = normalise([mean quality of h on probe j]_j), j = 1..N."""

    name: ClassVar[str] = "probe-outcome"

    def raw(self, source: RoutingTable, probes: ProbeSet, models: Sequence[str]) -> np.ndarray:
        table = source
        ids = np.asarray(table.prompt_ids, dtype=str)
        pos = {p: j for j, p in enumerate(probes.ids)}
        col = np.array([pos.get(p, -1) for p in ids], dtype=np.intp)  # int even when empty
        if missing := set(probes.ids) - set(ids[col >= 0]):
            raise ValueError(f"{len(missing)} probe prompts have no rows in the table")
        cols = [table.models.index(m) for m in models]
        q = table.quality[col >= 0][:, cols]  # (rows, m)
        j = col[col >= 0]
        out = np.full((len(models), len(probes)), np.nan)
        for h in range(len(models)):
            ok = np.isfinite(q[:, h])
            sums = np.bincount(j[ok], weights=q[ok, h], minlength=len(probes))
            counts = np.bincount(j[ok], minlength=len(probes))
            with np.errstate(invalid="ignore", divide="ignore"):
                out[h] = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
        return out

    def level(self, source: RoutingTable, probes: ProbeSet, models: Sequence[str]) -> np.ndarray:
        """(m,) mean quality of each model over the probes (what the unit vector drops)."""
        return np.nanmean(self.raw(source, probes, models), axis=1)
