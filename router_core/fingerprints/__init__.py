"""Model fingerprints: descriptors computed from a model's behaviour, with no retraining.

``PerplexityFingerprint`` (black box, CSCR Eq. 3-5) and ``LogitFootprint`` (open weights,
Eq. 2) implement ``router_core.descriptors.base.DescriptorKind``; importing this package
registers them for ``get_kind``. torch and transformers load only when a model is scored.
"""

from router_core.fingerprints.logit import LogitFootprint
from router_core.fingerprints.perplexity import AnswerSource, PerplexityFingerprint
from router_core.fingerprints.scorer import Scorer
from router_core.fingerprints.space import MixedDescriptor, kind_for_artifact, make_descriptor

__all__ = [
    "AnswerSource",
    "LogitFootprint",
    "MixedDescriptor",
    "PerplexityFingerprint",
    "Scorer",
    "kind_for_artifact",
    "make_descriptor",
]
