"""The deferral-curve figure: every router's curve (and λ-sweep points) on one axis.

``plot_deferral_curves`` takes plain (cost, quality) arrays so the dashboard can draw the
same figure from stored results.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

STYLE = {  # fixed colours so figures from different runs compare at a glance
    "oracle": ("black", ":"),
    "random": ("0.6", "--"),
    "cheapest": ("0.4", "--"),
    "best_single": ("0.2", "--"),
    "knn": ("tab:blue", "-"),
    "mlp": ("tab:orange", "-"),
    "umr": ("tab:green", "-"),
    "vanilla": ("tab:purple", "-"),
    "no_caro": ("tab:brown", "-"),
    "tollgate": ("tab:red", "-"),
}


def plot_deferral_curves(
    curves: Mapping[str, np.ndarray],
    path: str | Path,
    *,
    c_min: float,
    c_max: float,
    title: str = "",
    points: Mapping[str, np.ndarray] | None = None,
    audc: Mapping[str, float] | None = None,
) -> Path:
    """Write a PNG of each router's deferral curve on a linear cost axis (AUDC's measure).

    Args:
        curves: router -> (p, 2) curve vertices (cost, quality).
        points: router -> (L, 2) λ-sweep points, drawn faintly.
        audc: router -> AUDC, shown in the legend.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5.0), dpi=120)
    hi = c_max
    for curve in curves.values():
        hi = max(hi, float(curve[:, 0].max()))
    for name, curve in curves.items():
        colour, dash = STYLE.get(name, (None, "-"))
        xs = np.concatenate([curve[:, 0], [hi]])
        ys = np.concatenate([curve[:, 1], [curve[-1, 1]]])  # flat after the last vertex
        label = name if audc is None else f"{name} ({audc[name]:.3f})"
        width = 2.2 if name == "tollgate" else 1.3
        ax.plot(xs, ys, dash, color=colour, lw=width, label=label)
        if points is not None and name in points:
            p = points[name]
            ax.scatter(p[:, 0], p[:, 1], s=6, color=colour, alpha=0.35)
    ax.axvspan(c_min, c_max, color="0.95", zorder=0)
    ax.set_xlabel("mean cost per query (shaded: [C_min, C_max], the AUDC window)")
    ax.set_ylabel("mean quality")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="lower right", title="router (AUDC)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
