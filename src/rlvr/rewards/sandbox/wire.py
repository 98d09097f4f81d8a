"""The values the answer's process and the test runner exchange: plain data as tagged JSON, in
length-prefixed frames.

What crosses is data, never objects: None, bool, int, float (NaN and infinities too), str, bytes,
complex, and lists, tuples, dicts (any hashable keys), sets and frozensets of them. JSON has no
tuple or set, so those travel as one-key objects: `{"t": [...]}` a tuple, `{"d": [[k, v], ...]}`
a dict, `{"s": [...]}` a set, `{"fs": [...]}` a frozenset, `{"b": "<hex>"}` bytes, `{"c": [re,
im]}` a complex, `{"h": [id, label]}` a handle (an object that is not data, left where it lives).
A plain JSON object never occurs, so a tag cannot be mistaken for a value.

The decoder is the C scanner of the standard library's `_json`, driven directly: `json` itself
imports `re`, a tenth of the sandbox's start-up. It checks every tag and builds only builtins:
whatever the answer's process sends, the test runner gets a value whose `==` is the builtin
one (no answer-defined `__eq__` can cross). Nothing is ever unpickled or unmarshalled from the
answer's side.

This module runs inside the sandbox too (sent as compiled code): standard library only.
"""

from __future__ import annotations

import _json
import os

MAX_DEPTH = 200  # nesting of a value; deeper is refused (the C scanner would recurse)
MAX_FRAME_BYTES = 16 * 2**20  # one message; a bigger one ends the conversation
_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


class WireError(Exception):
    """A message that is not a well-formed value of this format (or is too big)."""


def _refuse(value):
    raise TypeError(f"{type(value).__name__} cannot be sent")


_dump = _json.make_encoder(None, _refuse, _json.encode_basestring_ascii, None, ":", ",",
                           False, False, True)


def to_plain(value, handle=_refuse, depth: int = 0):
    """`value` as JSON-ready builtins with tags; objects that are not data go to `handle`
    (which returns a tagged `{"h": [...]}` or raises TypeError). Subclasses of the data types
    are sent as their base type (a namedtuple as a tuple, a Counter as a dict)."""
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply to send")
    if value is None or value is True or value is False:
        return value
    down = depth + 1
    if isinstance(value, int):
        return int.__index__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, list):
        return [to_plain(v, handle, down) for v in list.__iter__(value)]
    if isinstance(value, tuple):
        return {"t": [to_plain(v, handle, down) for v in tuple.__iter__(value)]}
    if isinstance(value, dict):
        return {"d": [[to_plain(k, handle, down), to_plain(v, handle, down)]
                      for k, v in dict.items(value)]}
    if isinstance(value, frozenset):
        return {"fs": [to_plain(v, handle, down) for v in frozenset.__iter__(value)]}
    if isinstance(value, set):
        return {"s": [to_plain(v, handle, down) for v in set.__iter__(value)]}
    if isinstance(value, (bytes, bytearray)):
        return {"b": bytes(value).hex()}
    if isinstance(value, complex):
        return {"c": [complex.__getattribute__(value, "real"),
                      complex.__getattribute__(value, "imag")]}
    return handle(value)


def dumps(value, handle=_refuse) -> bytes:
    """One value as a message body."""
    return "".join(_dump(to_plain(value, handle), 0)).encode("ascii")


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
            items = _list(body)
            if not all(type(kv) is list and len(kv) == 2 for kv in items):
                raise WireError("a dict is a list of [key, value] pairs")
            return {k: v for k, v in items}
        if tag == "s":
            return set(_list(body))
        if tag == "fs":
            return frozenset(_list(body))
        if tag == "b" and type(body) is str:
            return bytes.fromhex(body)
        if tag == "c" and type(body) is list and len(body) == 2 and \
                all(type(x) in (int, float) for x in body):
            return complex(body[0], body[1])
        if tag == "h" and handle is not None and type(body) is list and len(body) == 2 and \
                type(body[0]) is int and type(body[1]) is str:
            return handle(body[0], body[1][:100])
        raise WireError(f"unknown or malformed tag {str(tag)[:20]!r}")

    scan = _json.make_scanner(_ScannerContext(tagged))

    def loads(data: bytes):
        try:
            text = data.decode("ascii")
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
        raise WireError(f"message of {size} bytes is over the {limit} byte limit")
    return _read_exactly(fd, size)


def _read_exactly(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 2**20))
        if not chunk:
            raise EOFError("the other side closed the channel")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
