"""Import litellm offline: its price map is bundled, the network fetch is disabled.

Import litellm only through ``from router_core.env.litellm_env import litellm``.
"""

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm

litellm.telemetry = False

__all__ = ["litellm"]
