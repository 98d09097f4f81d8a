"""The values the answer's process and the test runner exchange: plain data as tagged JSON, in
length-prefixed frames.

What crosses is data, never objects: None, bool, int, float (NaN and infinities too), str, bytes,
complex, range, and lists, tuples, dicts (any hashable keys), sets and frozensets of them; and
the standard library's data containers a reference harness would compare in process: a
namedtuple (rebuilt as a namedtuple of the same name and fields), `Counter`, `OrderedDict`,
`defaultdict` (of a builtin factory), `deque`. JSON has none of these but lists, so the rest
travel as one-key objects: `{"t": [...]}` a tuple, `{"d": [[k, v], ...]}` a dict, `{"s": [...]}`
a set, `{"fs": [...]}` a frozenset, `{"b": "<hex>"}` bytes, `{"c": [re, im]}` a complex,
`{"i": "<hex>"}` an int of more than 64 bits (hex has no digit limit, unlike `str(int)` past
4,300 digits), `{"r": [start, stop, step]}` a range, `{"nt": [name, [fields], [values]]}`,
`{"ct": ...}`, `{"od": ...}`, `{"dd": [factory, ...]}`, `{"dq": [maxlen, [...]]}` the
containers, `{"h": [id, label]}` a handle (an object that is not data, left where it lives). A
plain JSON object never occurs, so a tag cannot be mistaken for a value.

The decoder is the C scanner of the standard library's `_json`, driven directly: `json` itself
imports `re`, a tenth of the sandbox's start-up. It checks every tag and builds only builtins
and those standard containers: whatever the answer's process sends, the test runner gets a
value whose `==` is the standard one (no answer-defined `__eq__` can cross). Nothing is ever
unpickled or unmarshalled from the answer's side.

Limits (each named in the error a test fails with, "sandbox limit: ..."): a value nested
deeper than MAX_DEPTH (the reference's own `==` recurses, and stops near 1,000 too) and a
message over MAX_FRAME_BYTES.

This module runs inside the sandbox too (sent as compiled code): standard library only.
"""

from __future__ import annotations

import _json
import builtins
import os
import sys

MAX_DEPTH = 1000  # nesting of a value; deeper is refused (the C scanner would recurse)
MAX_FRAME_BYTES = 128 * 2**20  # one message; a bigger one ends the conversation
LIMIT = "sandbox limit: "  # how an error caused by one of this format's limits starts
# Python frames and C recursion a value of MAX_DEPTH takes to encode or decode: a dict's level is
# three JSON levels ({"d": [[k, v]]}), and the encoder's and scanner's C recursion is counted
# against the recursion limit.
_RECURSION = 4 * MAX_DEPTH + 200
_SMALL_INT = 2**63  # ints below this travel as JSON numbers, bigger ones as hex
_FLAT = frozenset({str, float, bool, type(None)})  # exact types the C encoder takes as they are
_FACTORIES = ("int", "float", "str", "bytes", "bool", "list", "tuple", "dict", "set",
              "frozenset")  # a defaultdict's factory that crosses: a builtin type, by name
_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


class WireError(Exception):
    """A message that is not a well-formed value of this format (or is too big)."""


class WireLimit(ValueError):
    """A value past one of this format's limits (its message starts with LIMIT)."""


def _refuse(value):
    raise TypeError(f"{type(value).__name__} cannot be sent")


_dump = _json.make_encoder(None, _refuse, _json.encode_basestring_ascii, None, ":", ",",
                           False, False, True)


def to_plain(value, handle=_refuse, depth: int = 0):
    """`value` as JSON-ready builtins with tags; objects that are not data go to `handle`
    (which returns a tagged `{"h": [...]}` or raises TypeError). Subclasses of the data types
    are sent as their base type (a Counter as a Counter, any other dict as a dict)."""
    if depth > MAX_DEPTH:
        raise WireLimit(f"{LIMIT}value nested deeper than {MAX_DEPTH}")
    if value is None or value is True or value is False:
        return value
    down = depth + 1
    if isinstance(value, int):
        value = int.__index__(value)
        return value if -_SMALL_INT < value < _SMALL_INT else {"i": hex(value)}
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, list):
        if _flat(value):  # C speed for a list of scalars (an argument of millions of items)
            return list.copy(value)
        return [to_plain(v, handle, down) for v in list.__iter__(value)]
    if isinstance(value, tuple):
        items = list(tuple.__iter__(value))
        if not _flat(items):
            items = [to_plain(v, handle, down) for v in items]
        fields = _namedtuple_fields(value)
        if fields is not None:
            return {"nt": [type(value).__name__, fields, items]}
        return {"t": items}
    if isinstance(value, dict):
        pairs = [[to_plain(k, handle, down), to_plain(v, handle, down)]
                 for k, v in dict.items(value)]
        return _tag_dict(value, pairs)
    if isinstance(value, frozenset):
        return {"fs": [to_plain(v, handle, down) for v in frozenset.__iter__(value)]}
    if isinstance(value, set):
        return {"s": [to_plain(v, handle, down) for v in set.__iter__(value)]}
    if isinstance(value, (bytes, bytearray)):
        return {"b": bytes(value).hex()}
    if isinstance(value, complex):
        return {"c": [complex.__getattribute__(value, "real"),
                      complex.__getattribute__(value, "imag")]}
    if isinstance(value, range):
        return {"r": [to_plain(value.start), to_plain(value.stop), to_plain(value.step)]}
    collections = sys.modules.get("collections")  # not loaded: no value can be a deque
    if collections is not None and isinstance(value, collections.deque):
        return {"dq": [value.maxlen, [to_plain(v, handle, down) for v in list(value)]]}
    return handle(value)


def _flat(items) -> bool:
    """Whether a list's or tuple's items go to the C encoder as they are: exact str, float,
    bool, None, or ints of 64 bits (checked at C speed: `map`, `min`, `max`)."""
    types = set(map(type, items))
    if int in types:
        return types <= {int, bool} and -_SMALL_INT < min(items) and max(items) < _SMALL_INT
    return types <= _FLAT


def _namedtuple_fields(value) -> list[str] | None:
    """A namedtuple's field names (a tuple subclass with `_fields` of identifiers, one per
    item); None for any other tuple."""
    if type(value) is tuple:
        return None
    fields = getattr(type(value), "_fields", None)
    if type(fields) is tuple and len(fields) == tuple.__len__(value) and \
            all(type(f) is str and f.isidentifier() for f in fields):
        return list(fields)
    return None


def _tag_dict(value: dict, pairs: list) -> dict:
    """A dict's tag: the standard containers by name, any other dict as a dict."""
    collections = sys.modules.get("collections")
    if collections is not None:
        if isinstance(value, collections.Counter):
            return {"ct": pairs}
        if isinstance(value, collections.OrderedDict):
            return {"od": pairs}
        if isinstance(value, collections.defaultdict):
            factory = value.default_factory
            name = getattr(factory, "__name__", None)
            if factory is None or (name in _FACTORIES and factory is getattr(builtins, name)):
                return {"dd": [None if factory is None else name, pairs]}
    return {"d": pairs}


def dumps(value, handle=_refuse) -> bytes:
    """One value as a message body; WireLimit past MAX_DEPTH or MAX_FRAME_BYTES."""
    with _Deep():
        body = "".join(_dump(to_plain(value, handle), 0)).encode("ascii")
    if len(body) > MAX_FRAME_BYTES:
        raise WireLimit(f"{LIMIT}a message of {len(body)} bytes, over the {MAX_FRAME_BYTES} "
                        f"byte limit")
    return body


class _Deep:
    """The recursion limit raised to what a value of MAX_DEPTH needs, for one encode or decode,
    then put back (the answer's process may have set its own)."""

    def __enter__(self):
        self.limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(self.limit, _RECURSION))

    def __exit__(self, *exc_info):
        sys.setrecursionlimit(self.limit)


class _ScannerContext:
    """What `_json.make_scanner` reads its settings from (json.JSONDecoder, without `re`)."""

    def __init__(self, pairs_hook):
        self.strict = True
        self.object_hook = None
        self.object_pairs_hook = pairs_hook
        self.parse_float = float
        self.parse_int = int
        self.parse_constant = _CONSTANTS.__getitem__
        self.memo = {}


def _list(body):
    if type(body) is not list:
        raise WireError("a tag's body must be a list")
    return body


def _pairs(body) -> list:
    items = _list(body)
    if not all(type(kv) is list and len(kv) == 2 for kv in items):
        raise WireError("a dict is a list of [key, value] pairs")
    return items


def _int(body) -> int:
    if type(body) is not str or not 0 < len(body) <= MAX_FRAME_BYTES or \
            not body.lstrip("-").startswith("0x"):
        raise WireError("a big int is a hex string")
    return int(body, 16)


def _range(body) -> range:
    if type(body) is not list or len(body) != 3 or not all(type(x) is int for x in body):
        raise WireError("a range is [start, stop, step]")
    return range(*body)  # ValueError for a step of 0


def _container(tag: str, body):
    """A standard library container (`collections`, imported only when one arrives)."""
    import collections

    if tag == "nt":
        if type(body) is not list or len(body) != 3 or type(body[0]) is not str or \
                type(body[1]) is not list or type(body[2]) is not list or \
                len(body[1]) != len(body[2]) or len(body[1]) > 1000:
            raise WireError("a namedtuple is [name, [fields], [values]]")
        return _namedtuple(body[0], tuple(body[1]))(*body[2])
    if tag == "ct":
        return collections.Counter(dict(_pairs(body)))
    if tag == "od":
        return collections.OrderedDict(_pairs(body))
    if tag == "dd":
        if type(body) is not list or len(body) != 2 or \
                (body[0] is not None and body[0] not in _FACTORIES):
            raise WireError("a defaultdict is [factory, pairs]")
        factory = None if body[0] is None else getattr(builtins, body[0])
        return collections.defaultdict(factory, _pairs(body[1]))
    if type(body) is not list or len(body) != 2 or \
            not (body[0] is None or (type(body[0]) is int and body[0] >= 0)):
        raise WireError("a deque is [maxlen, items]")
    return collections.deque(_list(body[1]), body[0])


_NAMEDTUPLES: dict = {}  # (name, fields) -> the class built for them here, reused


def _namedtuple(name: str, fields: tuple):
    cls = _NAMEDTUPLES.get((name, fields))
    if cls is None:
        import collections

        if not all(type(f) is str for f in fields):
            raise WireError("a namedtuple's fields are names")
        cls = collections.namedtuple(name, fields)  # ValueError for a name that is not one
        if len(_NAMEDTUPLES) < 1000:
            _NAMEDTUPLES[(name, fields)] = cls
    return cls


def make_loads(handle=None):
    """A decoder: message body -> value. `handle(id, label)` builds what a `{"h": ...}` tag
    stands for; without it handles are refused."""

    def tagged(pairs):
        if len(pairs) != 1:
            raise WireError("an object must hold exactly one tag")
        tag, body = pairs[0]
        if tag == "t":
            return tuple(_list(body))
        if tag == "d":
            return {k: v for k, v in _pairs(body)}
        if tag == "s":
            return set(_list(body))
        if tag == "fs":
            return frozenset(_list(body))
        if tag == "b" and type(body) is str:
            return bytes.fromhex(body)
        if tag == "c" and type(body) is list and len(body) == 2 and \
                all(type(x) in (int, float) for x in body):
            return complex(body[0], body[1])
        if tag == "i":
            return _int(body)
        if tag == "r":
            return _range(body)
        if tag in ("nt", "ct", "od", "dd", "dq"):
            return _container(tag, body)
        if tag == "h" and handle is not None and type(body) is list and len(body) == 2 and \
                type(body[0]) is int and type(body[1]) is str:
            return handle(body[0], body[1][:100])
        raise WireError(f"unknown or malformed tag {str(tag)[:20]!r}")

    scan = _json.make_scanner(_ScannerContext(tagged))

    def loads(data: bytes):
        try:
            text = data.decode("ascii")
            with _Deep():
                value, end = scan(text, 0)
        except WireError:
            raise
        except Exception as e:  # StopIteration, RecursionError, ValueError, TypeError, ...
            raise WireError(f"malformed message ({type(e).__name__})") from None
        if end != len(text):
            raise WireError("trailing data after a message")
        return value

    return loads


def frame(body: bytes) -> bytes:
    """One message as it travels: a 4-byte big-endian length, then the body."""
    return len(body).to_bytes(4, "big") + body


def write_frame(fd: int, body: bytes) -> None:
    """Send one message (`frame`)."""
    view = memoryview(frame(body))
    while view:
        view = view[os.write(fd, view):]


def read_frame(fd: int, limit: int = MAX_FRAME_BYTES) -> bytes:
    """Receive one message; EOFError if the other side closed, WireError past `limit`."""
    size = int.from_bytes(_read_exactly(fd, 4), "big")
    if size > limit:
        raise WireError(f"{LIMIT}message of {size} bytes is over the {limit} byte limit")
    return _read_exactly(fd, size)


def _read_exactly(fd: int, size: int) -> bytearray:
    """`size` bytes, read into one buffer (a big message is not held twice)."""
    data = bytearray(size)
    view, got = memoryview(data), 0
    while got < size:
        n = os.readv(fd, [view[got:got + 2**20]])
        if not n:
            raise EOFError("the other side closed the channel")
        got += n
    return data
