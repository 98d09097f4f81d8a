"""The index of a sharded state (DCP's `.metadata` file) read as data: a pickle interpreter that
builds only the records `torch.distributed.checkpoint` writes there, and nothing else.

Why no library served: DCP writes its index with `pickle.dump` (protocol 4 or 5: STACK_GLOBAL,
FRAME, MEMOIZE), so it must be read as a pickle. `pickle.Unpickler` with a `find_class` filter
is not enough: under protocol 4 it resolves a dotted name through module attributes
(`torch.distributed.checkpoint.metadata` with `os.system` is `os.system`, since that module
imports `os`), a REDUCE calls whatever it finds, and a BUILD sets attributes on any object it
is given, a class included. torch's weights-only unpickler, the one library reader of data
pickles, reads protocol 2 only.

What it is: `read_index(data)`, which runs the opcodes of protocols 2 to 5 that build plain
values (numbers, strings, bytes, tuples, lists, dicts, sets, the memo) and these, each checked:
- a global (STACK_GLOBAL) is looked up as a (module, qualname) pair in `ALLOWED`, which maps
  each pair to the class, function or dtype itself; a dotted name is refused, and so is every
  pair the table lacks. No module attribute is ever looked up;
- REDUCE calls only the constructors of `_CONSTRUCTORS` (a torch.Size, the memory-format enum,
  torch's layout lookup, a POSIX path), each with the arguments DCP gives it and no others;
- NEWOBJ creates only an instance of a record in `_RECORDS`, with no arguments, and BUILD only
  fills such an instance with that record's own fields;
- every other opcode (persistent ids, the copyreg extension registry, INST and OBJ,
  out-of-band buffers, protocol 0's text opcodes, GLOBAL) is refused.
The result must be a `Metadata` whose entries are DCP's records, and each storage entry must
name a file of the index's own directory (no path, no `..`) with no stream transforms (rlvr
writes none; a transform would decompress). Anything else: `NotAnIndex`.
What it is not: a reader of any other pickle, or of the tensor data the index points to
(`rlvr.checkpoint.safe_load` reads those as data).
"""

from __future__ import annotations

import dataclasses
import pathlib
import pickle
import struct
from typing import Any, Callable

import torch
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (_MEM_FORMAT_ENCODING, BytesStorageMetadata,
                                                   ChunkStorageMetadata, Metadata,
                                                   MetadataIndex, StorageMeta, TensorProperties,
                                                   TensorStorageMetadata)
from torch.serialization import _get_layout


class NotAnIndex(pickle.UnpicklingError):
    """The bytes are not a DCP index made of DCP's records only."""


# Records DCP pickles as NEWOBJ (no arguments) then BUILD (their fields).
_RECORDS: tuple[type, ...] = (Metadata, TensorStorageMetadata, BytesStorageMetadata,
                              ChunkStorageMetadata, TensorProperties, StorageMeta,
                              MetadataIndex, _StorageInfo)


def _one(kind: type) -> Callable[[tuple], bool]:
    return lambda args: len(args) == 1 and type(args[0]) is kind


def _ints(args: tuple) -> bool:
    return (len(args) == 1 and type(args[0]) is tuple
            and all(type(i) is int for i in args[0]))


def _strings(args: tuple) -> bool:
    return all(type(a) is str for a in args)


# What REDUCE may call, and the arguments each takes: torch.Size((2, 3)), the memory-format
# enum by value, `_get_layout("torch.strided")` (a lookup in torch's table of layouts), and
# the path DCP records as the checkpoint's id (a path object is built without touching disk).
_CONSTRUCTORS: dict[Any, Callable[[tuple], bool]] = {
    torch.Size: _ints, _MEM_FORMAT_ENCODING: _one(int), _get_layout: _one(str),
    pathlib.PosixPath: _strings, pathlib.PurePosixPath: _strings}

# (module, qualname) -> the object itself. Built from the objects, so each name means exactly
# that object; the dtypes are torch's own (pickled as `torch.float32` and so on), and the
# paths are named as both Python 3.11 (`pathlib`) and 3.13 (`pathlib._local`) write them.
ALLOWED: dict[tuple[str, str], Any] = {
    **{(o.__module__, o.__qualname__): o for o in (*_RECORDS, *_CONSTRUCTORS)},
    **{("torch", name): value for name, value in vars(torch).items()
       if isinstance(value, torch.dtype)},
    **{(module, path.__qualname__): path for module in ("pathlib", "pathlib._local")
       for path in (pathlib.PosixPath, pathlib.PurePosixPath)}}


def read_index(data: bytes) -> Metadata:
    """The `Metadata` pickled in `data`, built of DCP's records only; NotAnIndex otherwise."""
    try:
        index = _Interpreter(data).run()
    except NotAnIndex:
        raise
    except (pickle.UnpicklingError, TypeError, ValueError, KeyError, IndexError,
            AttributeError, RuntimeError, struct.error, OverflowError, RecursionError) as e:
        raise NotAnIndex(f"{type(e).__name__}: {e}") from None
    _check_index(index)
    return index


class _Interpreter:
    """One pass over one pickle; `run` returns what it builds."""

    def __init__(self, data: bytes):
        self.data, self.pos = memoryview(data), 0
        self.stack: list[Any] = []
        self.marks: list[list[Any]] = []
        self.memo: dict[int, Any] = {}
        ops: dict[bytes, Callable[[], None]] = {
            pickle.PROTO: lambda: self._protocol(self._read(1)[0]),
            pickle.FRAME: lambda: self._read(8),  # a frame's length: the opcodes follow as usual
            pickle.MARK: self._mark, pickle.POP_MARK: self._pop_mark,
            pickle.POP: lambda: self._pop(1),
            pickle.DUP: lambda: self._push(self.stack[-1]),
            pickle.NONE: lambda: self._push(None),
            pickle.NEWTRUE: lambda: self._push(True), pickle.NEWFALSE: lambda: self._push(False),
            pickle.BININT: lambda: self._push(self._unpack("<i", 4)),
            pickle.BININT1: lambda: self._push(self._read(1)[0]),
            pickle.BININT2: lambda: self._push(self._unpack("<H", 2)),
            # Lengths are read first; `_read` refuses one past the end (or negative).
            pickle.LONG1: lambda: self._push(pickle.decode_long(self._read(self._read(1)[0]))),
            pickle.LONG4: lambda: self._push(pickle.decode_long(self._read(
                self._unpack("<i", 4)))),
            pickle.BINFLOAT: lambda: self._push(self._unpack(">d", 8)),
            pickle.SHORT_BINUNICODE: lambda: self._push(self._text(self._read(1)[0])),
            pickle.BINUNICODE: lambda: self._push(self._text(self._unpack("<I", 4))),
            pickle.BINUNICODE8: lambda: self._push(self._text(self._unpack("<Q", 8))),
            pickle.SHORT_BINBYTES: lambda: self._push(bytes(self._read(self._read(1)[0]))),
            pickle.BINBYTES: lambda: self._push(bytes(self._read(self._unpack("<I", 4)))),
            pickle.BINBYTES8: lambda: self._push(bytes(self._read(self._unpack("<Q", 8)))),
            pickle.EMPTY_TUPLE: lambda: self._push(()),
            pickle.TUPLE: lambda: self._push(tuple(self._pop_mark())),
            pickle.TUPLE1: lambda: self._push((self.stack.pop(),)),
            pickle.TUPLE2: lambda: self._push(tuple(self._pop(2))),
            pickle.TUPLE3: lambda: self._push(tuple(self._pop(3))),
            pickle.EMPTY_LIST: lambda: self._push([]),
            pickle.LIST: lambda: self._push(self._pop_mark()),
            pickle.APPEND: self._append,
            pickle.APPENDS: self._appends,
            pickle.EMPTY_DICT: lambda: self._push({}),
            pickle.DICT: lambda: self._push(_pairs(self._pop_mark())),
            pickle.SETITEM: self._setitem, pickle.SETITEMS: self._setitems,
            pickle.EMPTY_SET: lambda: self._push(set()),
            pickle.ADDITEMS: self._additems,
            pickle.FROZENSET: lambda: self._push(frozenset(self._pop_mark())),
            pickle.BINGET: lambda: self._push(self.memo[self._read(1)[0]]),
            pickle.LONG_BINGET: lambda: self._push(self.memo[self._unpack("<I", 4)]),
            pickle.BINPUT: lambda: self._memoize(self._read(1)[0]),
            pickle.LONG_BINPUT: lambda: self._memoize(self._unpack("<I", 4)),
            pickle.MEMOIZE: lambda: self._memoize(len(self.memo)),
            pickle.STACK_GLOBAL: self._global, pickle.REDUCE: self._reduce,
            pickle.NEWOBJ: self._newobj, pickle.BUILD: self._build}
        self.ops = {code[0]: op for code, op in ops.items()}

    def run(self) -> Any:
        while True:
            code = self._read(1)[0]
            if code == pickle.STOP[0]:
                if len(self.stack) != 1 or self.marks:
                    raise NotAnIndex("the pickle ends with a malformed stack")
                return self.stack[0]
            op = self.ops.get(code)
            if op is None:
                raise NotAnIndex(f"opcode {bytes([code])!r} at byte {self.pos - 1} is not one "
                                 "DCP's index is written with")
            op()

    # -- reading ------------------------------------------------------------------------------
    def _read(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise NotAnIndex("the pickle is truncated")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def _unpack(self, fmt: str, n: int) -> Any:
        return struct.unpack(fmt, self._read(n))[0]

    def _text(self, n: int) -> str:
        return str(self._read(n), "utf-8", "surrogatepass")

    def _protocol(self, version: int) -> None:
        if not 2 <= version <= pickle.HIGHEST_PROTOCOL:
            raise NotAnIndex(f"pickle protocol {version}")

    # -- the stack ----------------------------------------------------------------------------
    def _push(self, value: Any) -> None:
        self.stack.append(value)

    def _pop(self, n: int) -> list[Any]:
        if len(self.stack) < n:
            raise NotAnIndex("the pickle pops an empty stack")
        values = self.stack[-n:]
        del self.stack[-n:]
        return values

    def _mark(self) -> None:
        self.marks.append(self.stack)
        self.stack = []

    def _pop_mark(self) -> list[Any]:
        values, self.stack = self.stack, self.marks.pop()
        return values

    def _top(self, kind: type) -> Any:
        if type(self.stack[-1]) is not kind:
            raise NotAnIndex(f"the pickle adds items to a {type(self.stack[-1]).__name__}")
        return self.stack[-1]

    def _append(self) -> None:
        item = self._pop(1)[0]
        self._top(list).append(item)

    def _appends(self) -> None:
        items = self._pop_mark()
        self._top(list).extend(items)

    def _setitem(self) -> None:
        key, value = self._pop(2)
        self._top(dict)[key] = value

    def _setitems(self) -> None:
        items = self._pop_mark()
        self._top(dict).update(_pairs(items))

    def _additems(self) -> None:
        items = self._pop_mark()
        self._top(set).update(items)

    def _memoize(self, slot: int) -> None:
        self.memo[slot] = self.stack[-1]

    # -- the checked opcodes ------------------------------------------------------------------
    def _global(self) -> None:
        module, name = self._pop(2)
        if type(module) is not str or type(name) is not str:
            raise NotAnIndex("a global named by something other than two strings")
        if "." in name:  # protocol 4 would walk it attribute by attribute
            raise NotAnIndex(f"{module} {name}: a dotted global name is not allowed in a state "
                             "file")
        found = ALLOWED.get((module, name))
        if found is None:
            raise NotAnIndex(f"{module}.{name} is not allowed in a state file")
        self._push(found)

    def _reduce(self) -> None:
        func, args = self._pop(2)
        check = next((c for f, c in _CONSTRUCTORS.items() if f is func), None)
        if check is None:
            raise NotAnIndex(f"the pickle calls {_name(func)}, which is not a constructor of "
                             "DCP's index")
        if type(args) is not tuple or not check(args):
            raise NotAnIndex(f"{_name(func)} is called with arguments DCP does not give it")
        self._push(func(*args))

    def _newobj(self) -> None:
        cls, args = self._pop(2)
        if not any(cls is r for r in _RECORDS):
            raise NotAnIndex(f"the pickle creates {_name(cls)}, which is not a record of DCP's "
                             "index")
        if args != ():
            raise NotAnIndex(f"the pickle creates a {_name(cls)} with arguments")
        self._push(cls.__new__(cls))

    def _build(self) -> None:
        state = self.stack.pop()
        record = self.stack[-1]
        kind = type(record)
        if kind not in _RECORDS:  # never a class, a path, a dict: only a record just created
            raise NotAnIndex(f"the pickle sets the state of a {kind.__name__}")
        if "__setstate__" in vars(kind):  # TensorProperties: a 5-tuple of plain values
            if type(state) is not tuple or len(state) != 5:
                raise NotAnIndex(f"the state of a {kind.__name__} is not DCP's")
            record.__setstate__(state)
            return
        fields = {f.name for f in dataclasses.fields(kind)}
        if type(state) is not dict or not all(type(k) is str and k in fields for k in state):
            raise NotAnIndex(f"the state of a {kind.__name__} holds other than its fields")
        vars(record).update(state)


def _pairs(items: list[Any]) -> dict[Any, Any]:
    if len(items) % 2:
        raise NotAnIndex("a dict of an odd number of items")
    return dict(zip(items[::2], items[1::2]))


def _name(value: Any) -> str:
    return getattr(value, "__qualname__", type(value).__name__)


def _tensor_entry(entry: TensorStorageMetadata) -> bool:
    properties, chunks = entry.properties, entry.chunks
    return (type(properties) is TensorProperties and type(properties.dtype) is torch.dtype
            and type(properties.layout) is torch.layout and type(entry.size) is torch.Size
            and type(chunks) is list
            and all(type(c) is ChunkStorageMetadata and type(c.offsets) is torch.Size
                    and type(c.sizes) is torch.Size for c in chunks))


def _check_index(index: Any) -> None:
    """The shape of DCP's index: records of the right kinds, each storage entry a file of the
    index's own directory read as it was written."""
    if type(index) is not Metadata:
        raise NotAnIndex(f"it holds a {type(index).__name__}, not a checkpoint index")
    if type(index.state_dict_metadata) is not dict or not all(
            type(k) is str and type(v) in (TensorStorageMetadata, BytesStorageMetadata)
            for k, v in index.state_dict_metadata.items()):
        raise NotAnIndex("its entries are not DCP's tensor and bytes records")
    for fqn, entry in index.state_dict_metadata.items():
        if type(entry) is TensorStorageMetadata and not _tensor_entry(entry):
            raise NotAnIndex(f"the entry of {fqn!r} is not a tensor's shape, dtype and chunks")
    if type(index.storage_data) is not dict:
        raise NotAnIndex("its storage entries are not a mapping")
    for key, info in index.storage_data.items():
        if type(key) is not MetadataIndex or type(info) is not _StorageInfo:
            raise NotAnIndex("its storage entries are not DCP's records")
        name = info.relative_path
        if (type(name) is not str or name in ("", ".", "..") or "/" in name or "\\" in name
                or "\0" in name):
            raise NotAnIndex(f"a storage entry names {name!r}, not a file beside the index")
        if not all(type(n) is int and n >= 0 for n in (info.offset, info.length)):
            raise NotAnIndex(f"a storage entry of {key.fqn!r} has no plain offset and length")
        if info.transform_descriptors:
            raise NotAnIndex(f"a storage entry of {key.fqn!r} asks for stream transforms "
                             f"{info.transform_descriptors!r}; rlvr writes none")
