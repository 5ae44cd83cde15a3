"""Describing a backend the router has no outcomes for: a prior placement from what its name
and price say (``placement``), refined by the probe readout of graded answers (``readout``)."""
