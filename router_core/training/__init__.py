"""Training the router: ``train_router(table, TrainConfig(...))`` returns a ``TrainResult``
whose ``router`` is the runtime ``Router`` (router_core.runtime.router) the gateway serves.

One step per module, read in this order:
- ``config``: ``TrainConfig`` (every setting, its default and why) and ``TrainResult``;
- ``prompts``: the training and validation prompts with their Φ(x), and the probe set;
- ``objective``: CSCR Eq. 8 + EquiRouter's CARO + a calibrated quality term;
- ``head``: the head module g_θ; ``fit``: the fit loop with early stopping on val;
- ``assemble``: p̂'s calibration, the probe readout for unseen experts, the ``Router``;
- ``train``: ``train_router``, the steps above put together;
- ``distillation``: other routers' p̂ as a teacher for the combined router;
- ``supervision``: DARS, gateway observations into a training table.

Names are imported on first use (PEP 562 ``__getattr__``), as in router_core.baselines:
``train_router`` needs torch, and a gateway that only reads ``supervision`` must not load it.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> the module that defines it
_WHERE = {
    "TrainConfig": "config",
    "TrainResult": "config",
    "train_router": "train",
    "aggregate_prompts": "prompts",
    "data_hash": "prompts",
    "fit_encoder": "prompts",
}

__all__ = [  # noqa: RUF022 - the order of _WHERE
    "TrainConfig", "TrainResult", "train_router", "aggregate_prompts", "data_hash",
    "fit_encoder",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
