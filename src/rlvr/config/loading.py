"""Loading a config: YAML files merged over the defaults, then `key.sub=value` overrides, by
OmegaConf (unknown keys and wrong types fail naming the field), then `validate`. A relative
data path in a file names the file's neighbour (`rlvr.config.paths`); in an override, the working
directory's. Every problem
is reported at once: a value that fails its merge is set aside and the rest merged and
checked, so one ConfigError names every unknown key, wrong type, range and bad combination.

Every failure of a merge is a ConfigError naming its field, whatever raised it: OmegaConf's own
errors carry the field, but a value that is not YAML (`[a,b`), a tag YAML refuses
(`!!python/object/apply`), a mapping where the schema holds a list (`data.train.0.weight=2`)
or an integer too large for a float field reach us as yaml, TypeError or OverflowError without
one. Overrides are merged one at a time, so each such error has its override's key; a file's
is found by merging its values one at a time once its merge has failed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rlvr.config.checks import config_problems, validate
from rlvr.config.migration import refuse_renamed, tree_keys
from rlvr.config.paths import resolve_data_paths
from rlvr.config.schema import Config, ConfigError

# What a merge raises besides OmegaConf's errors (which subclass ValueError or not).
_MERGE_ERRORS = (OmegaConfBaseException, yaml.YAMLError, TypeError, ValueError, OverflowError)


def load_config(paths: str | Path | list[str | Path] | None,
                overrides: list[str] = ()) -> Config:
    """YAML files (none, one, or several merged in order: a base config then presets such as
    `configs/presets/dr_grpo.yaml`) over the defaults, then `a.b=c` overrides; validated."""
    if paths is None:
        paths = []
    elif isinstance(paths, (str, Path)):
        paths = [paths]
    merged = OmegaConf.structured(Config)
    errors: list[str] = []  # of the merges; each failed value is left out of `merged`
    for path in paths:
        merged = _merge_file(merged, path, errors)
    _check_override_syntax(overrides)
    refuse_renamed((item.partition("=")[0] for item in overrides),
                   " in the command-line overrides")
    if overrides:
        try:  # all at once: a merge costs ~10 ms, and tests load configs by the thousand
            merged = OmegaConf.merge(merged, OmegaConf.from_dotlist(list(overrides)))
        except _MERGE_ERRORS:  # one at a time, to name each override that fails
            for item in overrides:
                try:
                    merged = _merge_override(merged, item)
                except ConfigError as e:
                    errors.append(str(e))
    _refuse_resolvers(OmegaConf.to_container(merged, resolve=False))
    if errors:
        _raise_with_the_rest(errors, merged)
    try:
        cfg = OmegaConf.to_object(merged)
    except _MERGE_ERRORS as e:
        raise ConfigError(f"config field '{getattr(e, 'full_key', None) or '?'}': "
                          f"{_first_line(e)}") from None
    assert isinstance(cfg, Config)
    validate(cfg)
    return cfg


def _raise_with_the_rest(errors: list[str], merged: DictConfig) -> None:
    """ConfigError of the merges' `errors` and of every problem `validate` finds in the config
    merged without the values that failed: all of them in one message."""
    try:
        errors = [*errors, *config_problems(OmegaConf.to_object(merged))]
    except _MERGE_ERRORS as e:
        errors.append(f"config field '{getattr(e, 'full_key', None) or '?'}': {_first_line(e)}")
    if len(errors) == 1:
        raise ConfigError(errors[0])
    raise ConfigError("invalid config:\n  - " + "\n  - ".join(errors))


def _merge_override(merged: DictConfig, item: str) -> DictConfig:
    """`merged` with the one override `key=value`; ConfigError naming `key` (or the field inside
    it OmegaConf names) if its value is not YAML or does not fit the field."""
    key, _, value = item.partition("=")
    where = " in the command-line overrides"
    try:
        incoming = OmegaConf.from_dotlist([item])
    except yaml.YAMLError as e:  # parsed as YAML: `[a,b`, `:`, a `!!python/...` tag
        problem = getattr(e, "problem", None) or _first_line(e)
        hint = "" if "control characters" in problem else "; quote it to give a string"
        raise ConfigError(f"config field '{key}'{where}: {value!r} is not a YAML value "
                          f"({problem}){hint}") from None
    except _MERGE_ERRORS as e:  # an integer of more than 4300 digits, ...
        raise ConfigError(f"config field '{key}'{where}: {_first_line(e)}") from None
    try:
        return OmegaConf.merge(merged, incoming)
    except _MERGE_ERRORS as e:
        raise _merge_error(e, merged, incoming, key, where) from None


def _merge_file(merged: DictConfig, path: str | Path, errors: list[str]) -> DictConfig:
    """`merged` with the config file at `path`; on a failure, its values are merged one at a
    time to find each field that fails (a merge is ~7 ms: not done for files that merge), its
    ConfigError appended to `errors` and the value left out."""
    loaded = _read_yaml(path)
    refuse_renamed(tree_keys(OmegaConf.to_container(loaded, resolve=False)), f" in {path}")
    if "data" in loaded:  # its relative data paths mean the file's neighbours (config.paths)
        loaded = OmegaConf.create(resolve_data_paths(OmegaConf.to_container(loaded,
                                                                            resolve=False), path))
    where = f" in {path}"
    try:
        return OmegaConf.merge(merged, loaded)
    except _MERGE_ERRORS as e:
        first = e
    tree = OmegaConf.to_container(loaded, resolve=False)
    failed = len(errors)
    for key, leaf in _leaves(tree):
        incoming = OmegaConf.create(leaf)
        try:
            merged = OmegaConf.merge(merged, incoming)
        except _MERGE_ERRORS as e:
            errors.append(str(_merge_error(e, merged, incoming, key, where)))
    if len(errors) == failed:  # no single value failed: the file's merge as a whole did
        raise _merge_error(first, merged, loaded, None, where) from None
    return merged


def _merge_error(e: Exception, merged: DictConfig, incoming: DictConfig, key: str | None,
                 where: str) -> ConfigError:
    """The one-line ConfigError of a failed merge of `incoming` (holding `key`) over `merged`:
    the field OmegaConf names, else where a mapping meets a list, else `key`."""
    mismatch = _container_mismatch(merged, OmegaConf.to_container(incoming, resolve=False))
    if isinstance(e, TypeError) and mismatch is not None:
        field, given = mismatch
        held = "list" if given == "mapping" else "mapping"
        hint = ""
        if held == "list":  # an override sets a list whole; a file writes one as a list
            hint = (f"; give the whole list ({field}=[...]): an element cannot be set by its "
                    "index" if where.endswith("overrides") else "; write a list (- item)")
        return ConfigError(f"config field '{field}'{where}: a {given} where the config holds a "
                           f"{held}{hint}")
    field = getattr(e, "full_key", None) or key or (mismatch[0] if mismatch else "?")
    if isinstance(e, OverflowError):
        return ConfigError(f"config field '{field}'{where}: the number is out of range "
                           f"({_first_line(e)})")
    return ConfigError(f"config field '{field}'{where}: {_first_line(e)}")


def _container_mismatch(base: Any, given: Any, path: str = "") -> tuple[str, str] | None:
    """(field, "mapping" or "list") where `given` puts a mapping over a list of `base` or a list
    over a mapping (OmegaConf's "Cannot merge incompatible container types" names neither)."""
    if not isinstance(given, dict):
        return None
    for name, value in given.items():
        sub = f"{path}.{name}" if path else str(name)
        node = base.get(name) if isinstance(base, DictConfig) else None
        if isinstance(node, ListConfig) and isinstance(value, dict):
            return sub, "mapping"
        if isinstance(node, DictConfig) and isinstance(value, (list, tuple)):
            return sub, "list"
        if isinstance(value, dict) and (found := _container_mismatch(node, value, sub)):
            return found
    return None


def _leaves(tree: dict, path: str = "") -> Iterator[tuple[str, dict]]:
    """(dotted key, a nested mapping holding only that value) for every value of `tree` that is
    not a non-empty mapping; lists are values (a merge replaces a list whole)."""
    for name, value in tree.items():
        sub = f"{path}.{name}" if path else str(name)
        if isinstance(value, dict) and value:
            yield from ((key, {name: leaf}) for key, leaf in _leaves(value, sub))
        else:
            yield sub, {name: value}


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
