"""`--model NAME` -> a config file: the project's `configs/NAME.yaml`, then the ones evalkit ships."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from evalkit.config.loader import load_config
from evalkit.config.schema import CONFIG_NAME_PATTERN, MatrixConfig
from evalkit.errors import ConfigError


def find_config(model: str, search_dir: Path | None = None) -> Path:
    """`--model NAME` -> `configs/NAME.yaml` in the project (cwd), then the configs evalkit ships."""
    if not re.match(CONFIG_NAME_PATTERN, model):
        raise ConfigError(f"--model {model!r}: a config name has letters, digits, '-', '_' or '.' only")
    local = (search_dir or Path.cwd()) / "configs" / f"{model}.yaml"
    if local.is_file():
        return local
    shipped = resources.files("evalkit") / "configs" / f"{model}.yaml"
    if shipped.is_file():
        return Path(str(shipped))
    known = sorted({p.stem for p in available_configs(search_dir)})
    raise ConfigError(f"--model {model}: no configs/{model}.yaml (known: {', '.join(known) or 'none'})")


def available_configs(search_dir: Path | None = None) -> list[Path]:
    """Every config `--model` can name, project ones first."""
    found = sorted(((search_dir or Path.cwd()) / "configs").glob("*.yaml"))
    shipped = resources.files("evalkit") / "configs"
    if shipped.is_dir():
        found += sorted(Path(str(p)) for p in shipped.iterdir() if p.name.endswith(".yaml"))
    return found


def resolve_config(model: str | None, config_path: Path | None) -> tuple[MatrixConfig, Path]:
    """The config named by `--model NAME` or `--config PATH`, and the file it came from."""
    if config_path is None and model is None:
        raise ConfigError("give --model NAME (configs/NAME.yaml) or --config PATH")
    path = config_path or find_config(model or "")
    return load_config(path), path
