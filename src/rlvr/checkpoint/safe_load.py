"""Reading state files as data: nothing in a state directory is code.

A training state may come from someone else (a shared run directory, a download), and a pickle
runs whatever callable it names while it loads. So every pickled file of a state is read with
an allowlist of what it may construct:
- `load_data`: `torch.load(weights_only=True)`, torch's own restricted unpickler (tensors,
  containers, numbers, strings), widened only by numpy's uint32 arrays, which states written
  before rlvr stored its numpy RNG state as a list hold; anything else is refused with the
  globals it names.
- `SafeFileSystemReader`: torch.distributed.checkpoint's reader, whose `.metadata` file is a
  plain `pickle.load` in torch 2.13, with that file read by `restricted_unpickle` instead (DCP's
  metadata records and what they hold); the tensor data it then reads is torch.load with
  weights_only=True already.
What it is not: the SHA-256 manifest (`rlvr.checkpoint.state`), which finds damage; a checksum
written beside a crafted file matches it, so only loading as data keeps a crafted file inert.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

from rlvr.device import HOST


class UnsafeStateFile(ValueError):
    """A state file holds something other than data (or cannot be read as data)."""


# Old states' numpy RNG state: a uint32 array (`np.random.get_state()`), rebuilt by these.
_NUMPY_ARRAY = [np._core.multiarray._reconstruct, np.ndarray, np.dtype,
                type(np.dtype(np.uint32))]


def load_data(path: Path) -> Any:
    """The object pickled in `path` by `torch.save`, if it is made of data only; else
    UnsafeStateFile naming the file and the globals it asks for."""
    try:
        with torch.serialization.safe_globals(_NUMPY_ARRAY):
            return torch.load(path, map_location=HOST, weights_only=True)
    except pickle.UnpicklingError as e:
        try:
            named = torch.serialization.get_unsafe_globals_in_checkpoint(str(path))
        except Exception:  # noqa: BLE001  an unreadable file: the load's own error says it
            named = []
        what = (f"it asks for {', '.join(named[:5])}" if named
                else str(e).strip().splitlines()[-1][:200])
        raise UnsafeStateFile(f"{path.name} is not plain data ({what}); a state file is "
                              "loaded as tensors and plain values only, never as code") from None
    except (RuntimeError, EOFError, OSError, ValueError) as e:
        raise UnsafeStateFile(f"{path.name} cannot be read ({str(e).splitlines()[0][:200]})"
                              ) from None


# What DCP's `.metadata` pickle may construct: its records, tensor shapes and dtypes, the
# layout helper, and the path DCP records.
_DCP_MODULES = {"torch.distributed.checkpoint.metadata"}
_DCP_GLOBALS = {("torch.distributed.checkpoint.filesystem", "_StorageInfo"), ("torch", "Size"),
                ("torch.serialization", "_get_layout"), ("pathlib", "PosixPath"),
                ("pathlib", "PurePosixPath"), ("pathlib", "Path"),
                ("collections", "OrderedDict")}


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if (module in _DCP_MODULES and not name.startswith("__")) or (module, name) in _DCP_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a state file")


def restricted_unpickle(data: bytes, source: str) -> Any:
    """Unpickle `data` allowing only DCP's metadata records; UnsafeStateFile otherwise."""
    try:
        return _RestrictedUnpickler(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, AttributeError, TypeError, ValueError) as e:
        raise UnsafeStateFile(f"{source} is not a plain checkpoint index ({e})") from None


class SafeFileSystemReader(FileSystemReader):
    """DCP's file reader with its metadata read by `restricted_unpickle`."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        path = self._get_metadata_path(kwargs.get("rank"))
        with self.fs.create_stream(path, "rb") as f:
            metadata = restricted_unpickle(f.read(), str(path))
        if not isinstance(metadata, Metadata):
            raise UnsafeStateFile(f"{path} holds a {type(metadata).__name__}, not a checkpoint "
                                  "index")
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata
