"""Loading a config: YAML files merged over the defaults, then `key.sub=value` overrides, by
OmegaConf (unknown keys and wrong types fail naming the field), then `validate`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
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
                merged = OmegaConf.merge(merged, _read_yaml(source))
            elif overrides:
                _check_override_syntax(overrides)
                merged = OmegaConf.merge(merged, OmegaConf.from_dotlist(list(overrides)))
        except OmegaConfBaseException as e:
            where = f" in {source}" if source else " in the command-line overrides"
            raise ConfigError(f"config field '{getattr(e, 'full_key', None)}'{where}: "
                              f"{_first_line(e)}") from None
    _refuse_resolvers(OmegaConf.to_container(merged, resolve=False))
    try:
        cfg = OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        raise ConfigError(f"config field '{getattr(e, 'full_key', None)}': "
                          f"{_first_line(e)}") from None
    assert isinstance(cfg, Config)
    validate(cfg)
    return cfg


# `${name:...}`: a resolver call (OmegaConf's `oc.env`, `oc.decode`, ...), as opposed to a
# plain `${section.field}` reference to another field, which stays allowed.
_RESOLVER_CALL = re.compile(r"\$\{\s*[\w.]+\s*:")


def _refuse_resolvers(tree: Any, path: str = "") -> None:
    """ConfigError naming the first field whose value calls a resolver. A shared config file or
    preset is not trusted to read the environment: `name: run-${oc.env:HF_TOKEN}` would copy a
    secret into the run's name, its config.yaml, W&B and the report."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            _refuse_resolvers(value, f"{path}.{key}" if path else str(key))
    elif isinstance(tree, list):
        for index, value in enumerate(tree):
            _refuse_resolvers(value, f"{path}[{index}]")
    elif isinstance(tree, str) and _RESOLVER_CALL.search(tree):
        raise ConfigError(f"config field '{path}': {tree!r} calls a resolver (${{name:...}}); "
                          "a config may refer to another field (${section.field}) but not read "
                          "the environment or run resolvers: write the value itself")


def to_yaml(cfg: Config) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def to_dict(cfg: Config) -> dict[str, Any]:
    return OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)  # type: ignore[return-value]


def _read_yaml(path: str | Path) -> DictConfig:
    """One config file as a mapping of sections; ConfigError in one line for a file that is
    missing, a directory, unreadable, not UTF-8, not YAML, or YAML that is not a mapping."""
    if Path(path).is_dir():
        raise ConfigError(f"config file {path} is a directory; name a YAML file")
    try:
        loaded = OmegaConf.load(path)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except OSError as e:
        raise ConfigError(f"config file {path} cannot be read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {path} is not UTF-8 text ({e.reason} at byte "
                          f"{e.start})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(e, "problem", None) or _first_line(e)
        raise ConfigError(f"config file {path} is not valid YAML: {problem}{where}") from None
    if not isinstance(loaded, DictConfig):
        raise ConfigError(f"config file {path} holds a list, not a mapping of sections "
                          "(experiment:, model:, ...)")  # OmegaConf loads a dict or a list
    return loaded


def _check_override_syntax(overrides: list[str]) -> None:
    for item in overrides:
        if "=" not in item or item.startswith("="):
            raise ConfigError(f"override '{item}' is not of the form key.sub=value")


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0]
