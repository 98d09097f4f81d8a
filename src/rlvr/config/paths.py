"""Relative data paths of a config file, resolved against that file's directory.

A config that names `data/rows.jsonl` beside itself ran only from the directory it was written
in: the path was read against the working directory. A path written in a YAML file now means
the file's neighbour, wherever `rlvr` is started; overrides on the command line are the
shell's, and stay relative to the working directory (they never pass through here).

The rule, for a data source's `name` and `data.chat_template` in a YAML file that look like a
path (hold a `/` or a suffix: `rows.jsonl`, `./mydata`, `hf:./snapshot`; a name such as
`gsm8k`, `r1_zero` or `hf:squad` is a name even beside a directory of that name; an absolute
path, and a value that calls `${...}`, are left as written):
1. relative to the YAML file's directory, if something is there: that path (relative to the
   working directory when inside it, else absolute: `_as_run_sees_it`);
2. else, as written, if it exists relative to the working directory: the old rule, kept so a
   config written for it still runs, and the configs launchers write for their ranks (which
   hold the paths a run read) read as they were written (logged, at info level);
3. else the path beside the YAML file, so its error names where it was looked for.
An `hf:` name is resolved only when the YAML's neighbour is a directory (a local snapshot);
else it is left as written: a hub id (`hf:openai/gsm8k`) or a working-directory path.

This is not where paths are checked: a path that exists nowhere fails where it is read.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_SOURCE_SECTIONS = ("train", "eval")  # the data sections that list sources
_HF = "hf:"


def resolve_data_paths(tree: dict[str, Any], config_file: str | Path) -> dict[str, Any]:
    """`tree` (a config file's values, as read) with its relative data paths resolved by the
    module's rule against `config_file`'s directory; `tree` itself is not changed."""
    data = tree.get("data")
    if not isinstance(data, dict):
        return tree
    base = Path(os.path.abspath(Path(config_file).parent))
    data = dict(data)
    for section in _SOURCE_SECTIONS:
        sources = data.get(section)
        if isinstance(sources, list):
            data[section] = [_resolve_source(s, base, f"data.{section}[{i}].name", config_file)
                             for i, s in enumerate(sources)]
    template = data.get("chat_template")
    if isinstance(template, str):
        data["chat_template"] = resolve_path(template, base, "data.chat_template", config_file)
    return {**tree, "data": data}


def _resolve_source(source: Any, base: Path, field: str, config_file: str | Path) -> Any:
    if not isinstance(source, dict) or not isinstance(source.get("name"), str):
        return source  # not a source: the schema's merge names what is wrong with it
    return {**source, "name": resolve_path(source["name"], base, field, config_file)}


def resolve_path(value: str, base: Path, field: str, config_file: str | Path) -> str:
    """`value` as the module's rule reads it from a YAML file in directory `base`."""
    hub = value.startswith(_HF)
    written = value[len(_HF):] if hub else value
    if "${" in written or Path(written).is_absolute() or not _looks_like_path(written):
        return value
    beside = _as_run_sees_it(base / written)
    if beside.is_dir() if hub else beside.exists():
        return f"{_HF}{beside}" if hub else str(beside)
    if hub:
        return value  # a hub id, or a directory relative to the working directory
    if Path(written).exists():
        # Info, not a warning: the configs launchers write for their ranks (`to_yaml` of the
        # loaded config) hold working-directory paths by design, and are read this way.
        log.info("%s=%r in %s: not found beside the config file (%s), read relative to the "
                 "working directory; written relative to the config file, it would run from any "
                 "directory", field, value, config_file, beside)
        return value
    return str(beside)


def _looks_like_path(written: str) -> bool:
    """Whether `written` is a path and not a name: it holds a `/` or a suffix. A built-in
    (`gsm8k`), a template (`tokenizer`) or a hub id without an owner (`hf:squad`) stays a
    name even when a directory of that name lies beside the config."""
    return "/" in written or bool(Path(written).suffix)


def _as_run_sees_it(path: Path) -> Path:
    """`path` relative to the working directory when it lies inside it, else absolute. A
    source's name seeds its shuffle and names its prompts: run from the directory a config was
    written for, its paths read as they always did (`examples/custom_task/reverse.jsonl`), and
    the order and ids do not change with where the checkout lies."""
    path = Path(os.path.normpath(os.path.abspath(path)))
    inside = os.path.relpath(path)
    return path if inside == ".." or inside.startswith(".." + os.sep) else Path(inside)
