"""Training objectives, one per module: Eq. 8 (CSCR) and the CARO ranking term (EquiRouter)."""

from router_core.losses.caro_ranking import CaroRanking
from router_core.losses.cost_spectrum_infonce import CostSpectrumInfoNCE, cost_bands

__all__ = ["CaroRanking", "CostSpectrumInfoNCE", "cost_bands"]
