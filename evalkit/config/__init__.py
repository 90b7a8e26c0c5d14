"""Matrix configs: the typed schema (schema.py, thresholds.py), the YAML loader (loader.py), `--model` lookup
(lookup.py), and the matrix of cells a config expands to (cells.py)."""

from evalkit.config.base import StrictModel
from evalkit.config.catalog import Catalog
from evalkit.config.loader import format_validation_error, load_config, parse_config
from evalkit.config.log_assertion import LogAssertion
from evalkit.config.lookup import available_configs, find_config, resolve_config
from evalkit.config.schema import (
    ABAxis,
    AxisValue,
    Devices,
    EngineConfig,
    Evals,
    Executor,
    MatrixConfig,
    SlurmSettings,
    Source,
    Timeouts,
    config_model,
)
from evalkit.config.settings import EngineSettings
from evalkit.config.thresholds import Threshold

__all__ = [
    "ABAxis", "AxisValue", "Catalog", "Devices", "EngineConfig", "EngineSettings", "Evals", "Executor", "LogAssertion", "MatrixConfig", "SlurmSettings", "Source", "StrictModel", "Threshold", "Timeouts", "config_model",
    "available_configs", "find_config", "resolve_config", "format_validation_error", "load_config", "parse_config",
]
