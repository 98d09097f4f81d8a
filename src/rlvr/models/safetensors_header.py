"""The header of one safetensors file, read as untrusted input without its tensor data: an
8-byte little-endian length, then that many bytes of JSON naming each tensor's dtype, shape
and byte range. ConfigError naming the file where it is not a file transformers can load.
This module reads no weights and knows nothing of configs or shard indexes (`checks` does).

The format's rules (UTF-8 JSON, known dtypes, shapes of non-negative integers, byte ranges
that tile the data exactly, each as long as its shape x dtype) are the safetensors library's:
its `safe_open` applies them on opening, reading the header only, so a file passes here
exactly when transformers' and the engines' loads (the same library) would open it. Before this
check they failed inside transformers with a SafetensorError traceback.
"""

from __future__ import annotations

import json
import struct
from collections import Counter
from pathlib import Path

from rlvr.config import ConfigError

# safetensors itself refuses a header over 100 MB.
MAX_HEADER_BYTES = 100_000_000


class _DuplicateName(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    # json keeps the last of two equal keys silently: a tensor named twice is refused instead.
    if len(pairs) > 1 and len({key for key, _ in pairs}) < len(pairs):
        name = next(key for key, count in Counter(key for key, _ in pairs).items() if count > 1)
        raise _DuplicateName(name)
    return dict(pairs)


def _check_opens(path: Path) -> None:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt"):
            pass  # opening validates the whole header against the file's size
    except (SafetensorError, OSError) as e:
        raise ConfigError(f"{path} is not a valid safetensors file: {e}") from None


def read_safetensors_header(path: Path) -> dict[str, dict]:
    """The tensor entries (name -> {"dtype", "shape", "data_offsets"}) of the safetensors file
    `path`, from its header alone, once the library has opened it and no tensor is named
    twice. The length prefix is bounded (by the file and MAX_HEADER_BYTES) before a byte of
    the header is read."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ConfigError(f"{path} is not a safetensors file (shorter than its header)")
        (length,) = struct.unpack("<Q", head)
        if length > min(MAX_HEADER_BYTES, size - 8):
            raise ConfigError(f"{path}: its header claims {length} bytes, more than the file "
                              f"holds or {MAX_HEADER_BYTES}")
        _check_opens(path)  # after the bound: its messages name no byte counts
        try:
            header = json.loads(f.read(length), object_pairs_hook=_unique_keys)
        except _DuplicateName as e:
            raise ConfigError(f"{path}: its header names {e} twice") from None
        except (ValueError, RecursionError) as e:  # the library refused both first; kept as a net
            raise ConfigError(f"{path}: its header is not valid JSON: {e}") from None
    if not isinstance(header, dict):
        raise ConfigError(f"{path}: its header is not a JSON object")
    header.pop("__metadata__", None)
    return header
