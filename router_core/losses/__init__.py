"""Training objectives, one per module: Eq. 8 (CSCR), the CARO ranking term (EquiRouter) and
the cascade's estimate matching (router_core/tuning/cascade_fit.py)."""

from router_core.losses.caro_ranking import CaroRanking
from router_core.losses.cost_spectrum_infonce import CostSpectrumInfoNCE, cost_bands
from router_core.losses.estimate_match import EstimateMatch, router_quality

__all__ = ["CaroRanking", "CostSpectrumInfoNCE", "EstimateMatch", "cost_bands", "router_quality"]
