"""Loading a config: YAML files merged over the defaults, then `key.sub=value` overrides, by
OmegaConf (unknown keys and wrong types fail naming the field), then `validate`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rlvr.config.checks import validate
from rlvr.config.schema import Config, ConfigError


def load_config(paths: str | Path | list[str | Path] | None,
                overrides: list[str] = ()) -> Config:
    """YAML files (none, one, or several merged in order: a base config then presets such as
    `configs/presets/dr_grpo.yaml`) over the defaults, then `a.b=c` overrides; validated."""
    if paths is None:
        paths = []
    elif isinstance(paths, (str, Path)):
        paths = [paths]
    merged = OmegaConf.structured(Config)
    for source in [*paths, None]:
        try:
            if source is not None:
                merged = OmegaConf.merge(merged, OmegaConf.load(source))
            elif overrides:
                _check_override_syntax(overrides)
                merged = OmegaConf.merge(merged, OmegaConf.from_dotlist(list(overrides)))
        except OmegaConfBaseException as e:
            where = f" in {source}" if source else " in the command-line overrides"
            raise ConfigError(f"config field '{getattr(e, 'full_key', None)}'{where}: "
                              f"{_first_line(e)}") from None
        except FileNotFoundError:
            raise ConfigError(f"config file {source} does not exist") from None
    try:
        cfg = OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        raise ConfigError(f"config field '{getattr(e, 'full_key', None)}': "
                          f"{_first_line(e)}") from None
    assert isinstance(cfg, Config)
    validate(cfg)
    return cfg


def to_yaml(cfg: Config) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def to_dict(cfg: Config) -> dict[str, Any]:
    return OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)  # type: ignore[return-value]


def _check_override_syntax(overrides: list[str]) -> None:
    for item in overrides:
        if "=" not in item or item.startswith("="):
            raise ConfigError(f"override '{item}' is not of the form key.sub=value")


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0]
