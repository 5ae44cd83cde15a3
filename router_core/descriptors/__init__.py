"""Expert descriptors e_h: pluggable kinds, all unit vectors on an artifact's probe set."""

from router_core.descriptors.base import DescriptorKind, ProbeSet, get_kind, known_kinds, unit_rows
from router_core.descriptors.probe_outcome import ProbeOutcome

__all__ = ["DescriptorKind", "ProbeOutcome", "ProbeSet", "get_kind", "known_kinds", "unit_rows"]
