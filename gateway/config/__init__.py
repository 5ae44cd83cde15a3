"""config.yaml as typed settings: ``settings`` (the pool, prices, routes, database),
``reliability`` (its ``reliability:`` section) and ``loading`` (file, environment and the
CLI's lookup of both)."""

from gateway.config.backend import ROUTER_ONLY_PARAMS, Backend, ModelInfo
from gateway.config.exploration import ExplorationSettings, JudgeSettings
from gateway.config.loading import (
    data_home,
    load_settings,
    resolve_config_path,
    resolve_database_url,
    settings_from_dict,
)
from gateway.config.reliability import (
    CircuitSettings,
    OutageSettings,
    RateLimitSettings,
    ReliabilitySettings,
)
from gateway.config.retraining import Retraining
from gateway.config.routes import Route
from gateway.config.settings import DEFAULT_CONFIG_PATH, ConfigError, Settings

__all__ = [
    "DEFAULT_CONFIG_PATH", "ROUTER_ONLY_PARAMS", "Backend", "CircuitSettings", "ConfigError",
    "ExplorationSettings", "JudgeSettings",
    "ModelInfo", "OutageSettings", "RateLimitSettings", "ReliabilitySettings", "Retraining",
    "Route", "Settings", "data_home", "load_settings", "resolve_config_path",
    "resolve_database_url", "settings_from_dict",
]
