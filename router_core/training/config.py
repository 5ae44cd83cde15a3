"""Training settings and result: ``TrainConfig`` and ``TrainResult`` (router_core.training)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from router_core.descriptors.base import ProbeSet
from router_core.runtime.router import Router


@dataclass(frozen=True)
class TrainConfig:
    """Hyperparameters: the papers' values (CSCR App. D, EquiRouter Table A1) where they
    survived validation; the rest were chosen on dev folds carved from RouterBench's train
    rows (never its test rows): see the validation record in the module docstring."""

    seed: int = 0
    # descriptors
    n_probes: int = 192  # CSCR: 192 probes from the training set ...
    exclude_probes: bool = False  # CSCR excludes them from training; keeping them validated
    # no worse (RouterBench dev 0.854 either way, LLMRouter 0.622 vs 0.619)
    # head g_θ: 384 → hidden → d (= descriptor dimension)
    hidden: int = 256
    init_head: Literal["random", "probe-kernel"] = "random"  # probe-kernel: kNN over probes
    kernel_top: float = 0.05  # probe-kernel: share of training prompts each probe unit fires on
    activation: str = "relu"
    dropout: float = 0.1
    # optimisation (CSCR: AdamW, lr 5e-4, batch 512, 10 epochs; full-batch steps with early
    # stopping on val validated better here)
    epochs: int = 300
    batch_size: int = 0  # 0 = full batch (one step per epoch)
    lr: float = 1e-3
    weight_decay: float = 0.01
    patience: int = 20  # epochs without a better validation criterion before stopping
    # Eq. 8 (CSCR: K_b = 5, τ_min = 0.05, α = 0.25, γ = 0.2); "vanilla" = one band, γ = 0
    loss: Literal["cscr", "vanilla"] = "cscr"
    cs_weight: float = 0.02  # weight of Eq. 8 (or 6) beside the calibrated quality term
    n_bands: int = 5
    tau_min: float = 0.05
    alpha: float = 0.25
    gamma: float = 0.2
    positive_tolerance: float = 0.0  # P(i) = {h: u_ih ≥ max_h u_ih − tol, u_ih > 0}
    # CARO (EquiRouter: δ = 0 for 0/1 utilities, ρ = 0.1 on RouterBench, λ_CARO = 1)
    use_caro: bool = True
    caro_weight: float = 0.1
    caro_delta: float = 0.0
    caro_rho: float = 0.1
    caro_scale: float = 20.0  # cosines are in [−1, 1]; 1/τ_min puts pairs on a logit scale
    caro_on: Literal["similarity", "logit"] = "logit"  # rank a_h·s + b_h (routed) or s = q·e
    # learned scale: joint per-model logistic on s (0 = off)
    calib_weight: float = 1.0
    calib_c: float = 1.0  # inverse L2 strength of the post-hoc calibration fit
    # where p̂'s (a_h, b_h) come from: the jointly learned ones, or a post-hoc logistic fit
    # on val rows, train rows, or both
    calibrate: Literal["learned", "val", "train", "train+val"] = "train+val"
    # models without training rows (unseen) where the table has their probe outcomes:
    # "readout" fits each one's own direction and scale in the head's space on its probes
    # (router_core.cold_start.readout, replacing its footprint, or refining its fingerprint: below);
    # "level" (and any model without probe outcomes) is placed by its probe level through
    # the seen models' fit. (Refitting only (a_h, b_h) validated worse than both.)
    calibrate_unseen: Literal["level", "readout"] = "readout"
    readout_c: float = 1.0  # inverse L2 strength of the "readout" fit
    # "readout" for fingerprinted unseen models too, where their probe outcomes are known:
    # the fingerprint, times its level-rule slope (a_h·e_h), is the readout's prior mean
    readout_fingerprints: bool = True
    # decision rule stored in the artifact. k = 0 scores every expert: top-k by raw
    # similarity (CSCR's k = 4) drops experts whose calibrated p̂ would win
    k: int = 0
    delta: float = 0.01
    # early stopping on the val quality-estimate error pooled over every observed cell, or
    # (combined tables) the mean of each dataset's own error, so that the dataset with the
    # most cells (MMLU-Pro: 29 models) does not pick the epoch for the others alone
    stop_on: Literal["pooled", "per-dataset"] = "pooled"
    # combined tables: weight β of each dataset's own router's p̂ in the quality term's
    # target, ũ = (1 − β)·u + β·p̂_teacher (router_core.training.distillation; 0 = gold labels only)
    distill: float = 0.0
    # combined tables: each dataset's cells in the quality term weigh ∝ n_cells^(−balance)
    # (0 = every observed cell the same, pooled; 1 = every dataset the same in total); 0.5
    # had the smallest largest loss against the single-dataset routers on five validation
    # carves (docs/training-record.md); single-dataset tables are unaffected
    balance: float = 0.5
    # data
    val_fraction: float = 0.1  # carved from train when the table has no val rows
    threads: int = 1  # torch CPU threads (fixed, for determinism)
    progress: bool = True

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class TrainResult:
    router: Router
    metrics: dict[str, Any]
    probes: ProbeSet
    data_hash: str
    history: list[dict] = field(default_factory=list)

    def save(self, path: str | Path) -> Path:
        """Write the versioned artifact (router_core.artifact) with metrics, hash, probes."""
        from router_core.artifact import save_router

        return save_router(
            self.router,
            path,
            metrics=self.metrics,
            data_hash=self.data_hash,
            probes=self.probes.to_json(),
            extra={
                "probe_set": {
                    "n": len(self.probes),
                    "kind": self.router.experts[0].kind if self.router.experts else None,
                }
            },
        )
