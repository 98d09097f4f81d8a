"""The sandbox every chat template renders in (`BoundedEnvironment`): jinja2's immutable
sandbox with its values, output and time bounded. A chat template is the user's or a
downloaded model's code, run on every row before the model loads (`rlvr.data.templates`).

What is bounded: a `*`, `**`, `+` or `~` result, a call's size argument and the output; a
result that is a product of two values (`s.replace('a', s)`, `x|join(s)`, a format's widths)
is sized before it is built (`text_size` and the `*_SIZES` tables), since checking it after
means the memory is already taken; what one render builds, together; and the time, by a
deadline ticked on every check (and an interval timer on the main thread). Past a limit a
render raises `TemplateLimitError`, a ConfigError naming it.

Every callable a template reaches is bounded before it runs, because the deadline cannot stop
C code (`strftime_now('%9999Y' * 100000)` took 1 GB and 1.1 s in strftime; 600,000 repeats
4.3 GB and 20.7 s): `strftime_now` by its format's length and each directive's width
(`strftime_now`), `lipsum` by the words it would write, `*` of two integers by the bits of the
product (fourteen squarings of 2**40000 take seconds in one C multiplication), `str.encode`
and `bytes.decode` to the codecs written in C (punycode and idna are Python loops the
deadline does not reach off the main thread), the filters by `FILTER_SIZES`, str methods by
`STR_METHOD_SIZES`. The rest are linear in a capped value (`upper`, `split`, `count`): their
results go through `checked`.
"""

from __future__ import annotations

import codecs
import inspect
import math
import re
import signal
import string
import sys
import threading
import time
from datetime import datetime
from typing import Any, Callable

import jinja2
import jinja2.filters
import jinja2.utils
from jinja2.compiler import CodeGenerator
from jinja2.sandbox import ImmutableSandboxedEnvironment

from rlvr.config import ConfigError

MAX_VALUE_CHARS = 1 << 22  # a string or list a template builds (4 Mi items)
MAX_OUTPUT_CHARS = 1 << 24  # one rendered prompt (16 Mi characters)
MAX_RENDER_SECONDS = 2.0  # one render
MAX_POWER_BITS = 1 << 16  # an integer `**` result


MAX_RENDER_BYTES = 1 << 28  # the values one render builds, together (`checked`)
MAX_STRFTIME_FORMAT = 256  # characters of a `strftime_now` format ("%Y-%m-%d": 8)
MAX_STRFTIME_WIDTH = 64  # a strftime directive's field width (glibc's "%64Y")
MAX_LIPSUM_WORDS = MAX_VALUE_CHARS // 16  # `lipsum`'s paragraphs times their most words
# Codecs `str.encode` / `bytes.decode` may use, by `codecs.lookup` name: written in C, linear.
TEMPLATE_CODECS = frozenset({"utf-8", "utf-16", "utf-16-le", "utf-16-be", "utf-32",
                             "utf-32-le", "utf-32-be", "ascii", "iso8859-1"})


class _TooBig(Exception):
    pass


def text_size(value: Any, limit: int = MAX_VALUE_CHARS) -> int:
    """An upper bound on len(str(value)), exact for a string, counted only until it passes
    `limit`: a container writes its items' reprs, a string's up to 10 characters a
    character (`\\U0001f600`), and an item shared many times (`[s] * 99`) counts each time."""
    if isinstance(value, str):
        return len(value)
    sizes: dict[int, int] = {}  # a container's size by id: shared ones are walked once

    def size(v: Any) -> int:
        if isinstance(v, str):
            quotes = v.count("'") + v.count("\\")
            return len(v) + 2 + quotes if v.isprintable() else 10 * len(v) + 2
        if v is None or isinstance(v, (bool, float, jinja2.Undefined)):
            return 32
        if isinstance(v, int):
            return v.bit_length() // 3 + 2
        if isinstance(v, jinja2.utils.Namespace):
            v = object.__getattribute__(v, "_Namespace__attrs")
        if not isinstance(v, (list, tuple, set, frozenset, dict)):
            return 256  # a loop, a cycler, a range: a short repr
        if id(v) in sizes:
            return sizes[id(v)]
        sizes[id(v)] = 8  # a container inside itself writes `[...]`
        items = [x for kv in v.items() for x in kv] if isinstance(v, dict) else v
        n = 16 + 2 * len(items)
        if n > limit:
            raise _TooBig
        for item in items:
            n += size(item)
            if n > limit:
                raise _TooBig
        sizes[id(v)] = n
        return n

    try:
        return size(value)
    except _TooBig:
        return limit + 1


def sized_items(iterable: Any, separator: int = 0, what: str = "join") -> list:
    """`iterable` as a list, refused (past MAX_VALUE_CHARS of text, `separator` characters
    between items) before it is all built: a generator's items (`x|map('upper')`) may each
    be a new string."""
    items, size = [], 0
    for item in iterable:
        items.append(item)
        size += text_size(item) + separator
        if size > MAX_VALUE_CHARS:
            raise TemplateLimitError(f"the template would {what} over {MAX_VALUE_CHARS:,} "
                                     "characters")
    return items


def _widths(spec: str, numbers: list[Any]) -> int:
    """The widest field a format spec may write: its largest number, or where it takes a
    width from the arguments (`*`, `{}`), the largest integer among `numbers`."""
    runs = re.findall(r"\d+", spec)
    width = max([int(r) if len(r) <= 8 else MAX_VALUE_CHARS + 1 for r in runs], default=0)
    if "*" in spec or "{" in spec:
        width = max([width] + [abs(n) for n in numbers if isinstance(n, int)])
    return width


def percent_size(fmt: str, values: Any) -> int:
    """A bound on `fmt % values`: each `%` writes at most its widest width or its largest
    value."""
    items = list(values) if isinstance(values, tuple) else [values]
    if fmt.count("%") == 0:
        return len(fmt)
    widest = max([text_size(v) for v in items], default=0)
    return len(fmt) + fmt.count("%") * (_widths(fmt, items) + widest)


def format_size(fmt: str, args: tuple, kwargs: dict) -> int:
    """A bound on `fmt.format(*args, **kwargs)`: each field writes at most its width or the
    largest argument (an attribute of one is inside its text)."""
    values = [*args, *kwargs.values()]
    widest = max([text_size(v) for v in values], default=0)
    size = 0
    for literal, field, spec, _ in string.Formatter().parse(fmt):
        size += len(literal)
        if field is not None:
            size += _widths(spec or "", values) + widest
    return size


def _joined_size(items: list, separator: int) -> int:
    """len(sep.join(map(str, items))) for a separator of `separator` characters, bounded."""
    return sum(map(text_size, items)) + separator * max(len(items) - 1, 0)


def _replace_size(s: str, old: str, new: str, count: Any = -1) -> int:
    times = s.count(old) if old else len(s) + 1
    if isinstance(count, int) and count >= 0:
        times = min(times, count)
    return len(s) + times * max(len(new) - len(old), 0)


# Predicted result sizes of str methods whose result is a product (`s.replace('a', s)`);
# `center`, `ljust`, `zfill` are bounded by their capped width argument.
STR_METHOD_SIZES: dict[str, Callable[[str, tuple, dict], int]] = {
    "replace": lambda s, a, k: _replace_size(s, *[_str(x) for x in a[:2]], *a[2:], **k),
    "join": lambda s, a, k: _joined_size(a[0], len(s)),
    "expandtabs": lambda s, a, k: len(s) + s.count("\t") * int((a or [k.get("tabsize", 8)])[0]),
    "translate": lambda s, a, k: len(s) * max([1] + [text_size(v) for v in a[0].values()])
    if a and isinstance(a[0], dict) else len(s),
    "format": lambda s, a, k: format_size(s, a, k),
    "format_map": lambda s, a, k: format_size(s, a, k),
}


def _join_filter_size(a: dict) -> int:
    separator = len(_str(a["d"]))
    a["value"] = sized_items(a["value"], separator)
    return _joined_size(a["value"], separator)


def _sum_filter_size(a: dict) -> int:
    if not isinstance(a["start"], (list, tuple, str)):
        return 0  # numbers
    items = sized_items(a["iterable"], what="sum")
    if a["attribute"] is not None:
        get = jinja2.filters.make_attrgetter(a["environment"], a["attribute"])
        items, a["attribute"] = [get(x) for x in items], None
    size = len(a["start"]) + sum(len(x) if hasattr(x, "__len__") else 1 for x in items)
    if size <= MAX_VALUE_CHARS and isinstance(a["start"], (list, tuple)):
        # one concatenation, not one per item: summing n lists copies the growing total n
        # times (4M one-item lists would take hours)
        a["iterable"] = [type(a["start"])(x for item in items for x in item)]
    else:
        a["iterable"] = items
    return size


def _str(value: Any) -> str:
    """str(value), refused first if it would pass MAX_VALUE_CHARS (`new` in
    `s|replace('a', [s] * 99)`)."""
    if text_size(value) > MAX_VALUE_CHARS:
        raise TemplateLimitError(f"the template would write a value of over "
                                 f"{MAX_VALUE_CHARS:,} characters as text")
    return str(value)


def _lines(s: Any) -> int:
    return _str(s).count("\n") + 1


# A strftime directive: "%", glibc's flags, a width, an E/O modifier, the conversion (taken
# too, so "%%9999Y" is a literal "%" then text).
_STRFTIME_DIRECTIVE = re.compile(r"%[-_0^#+]*(\d*)[EO]?(?:.|$)", re.ASCII | re.DOTALL)


def strftime_now(format: str) -> str:
    """transformers' chat-template global: the local time written by `format`, refused before
    strftime runs if the format passes MAX_STRFTIME_FORMAT characters or a directive's width
    MAX_STRFTIME_WIDTH, so it writes at most about 64 characters a directive (strftime is C:
    no deadline stops it)."""
    if not isinstance(format, str):
        raise TemplateLimitError(f"the template passed strftime_now a {type(format).__name__}")
    if len(format) > MAX_STRFTIME_FORMAT:
        raise TemplateLimitError(f"the template passed strftime_now a format of {len(format):,} "
                                 f"characters (over {MAX_STRFTIME_FORMAT})")
    for directive in _STRFTIME_DIRECTIVE.finditer(format):
        width = directive.group(1)
        if width and (len(width) > 3 or int(width) > MAX_STRFTIME_WIDTH):
            raise TemplateLimitError(f"the template passed strftime_now a field width of {width}"
                                     f" (over {MAX_STRFTIME_WIDTH})")
    return datetime.now().strftime(format)


def _codec_of(args: tuple, kwargs: dict) -> str:
    """The codec an `encode`/`decode` call names (utf-8 when it names none)."""
    name = kwargs.get("encoding", args[0] if args else "utf-8")
    try:
        return codecs.lookup(name).name if isinstance(name, str) else repr(name)
    except LookupError:
        return name


# Predicted result sizes of jinja2 filters, from their bound arguments by name (a filter may
# replace an iterator argument with the list it read).
FILTER_SIZES: dict[str, Callable[[dict], int]] = {
    "replace": lambda a: _replace_size(_str(a["s"]), _str(a["old"]), _str(a["new"]), a["count"]),
    "join": _join_filter_size,
    "sum": _sum_filter_size,
    "format": lambda a: percent_size(_str(a["value"]), a["kwargs"] or a["args"]),
    "indent": lambda a: len(_str(a["s"])) + _lines(a["s"]) * (
        len(a["width"]) if isinstance(a["width"], str) else int(a["width"])),
    # a line per character at worst, each ending in `wrapstring`
    "wordwrap": lambda a: len(_str(a["s"])) * (1 + len(_str(a["wrapstring"] or "\n"))),
    # every word a link carrying `target` and `rel`
    "urlize": lambda a: len(_str(a["value"])) + (_str(a["value"]).count(" ") + _lines(
        a["value"])) * (len(_str(a["target"] or "")) + len(_str(a["rel"] or ""))),
}

# Filters that never write their input as text; any other (`string`, `replace`, `tojson`, a
# filter added later) has its input's text sized first.
NON_TEXT_FILTERS = frozenset({
    "abs", "attr", "batch", "count", "d", "default", "dictsort", "first", "float", "groupby",
    "int", "items", "last", "length", "list", "map", "max", "min", "random", "reject",
    "rejectattr", "reverse", "round", "safe", "select", "selectattr", "slice", "sort", "sum",
    "unique", "filesizeformat"})


class TemplateLimitError(ConfigError):
    """A template went past a `BoundedEnvironment` limit while rendering."""


_TICKING = "rlvr_ticking"  # the filter every loop's iterable goes through (`_generate`)


class _BoundedCodeGenerator(CodeGenerator):
    """Compiles `a ~ b` (jinja2's Concat, which the sandbox cannot intercept) so its result
    goes through `environment.checked`."""

    def visit_Concat(self, node, frame) -> None:
        # jinja2's own, with each operand sized (`environment.operand`) before str() writes
        # it: `'x' ~ [s] * 99` would write 99 copies of s
        self.write("environment.checked(str_join((")
        for arg in node.nodes:
            self.write("environment.operand(")
            self.visit(arg, frame)
            self.write("), ")
        self.write(")))")


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """jinja2's immutable sandbox with size caps and a per-render deadline (`render`).

    A result is sized before it is built wherever its size is the product of two things the
    template controls (`s.replace('a', s)`, `x|join(s)`, `('{:>4000000}' * 99).format(1)`,
    `{{ [s] * 99 }}`): checking it afterwards would come too late, the memory already taken.
    Growth by a constant factor of a capped value (`upper`, `escape`) is left to `checked`."""

    code_generator_class = _BoundedCodeGenerator
    intercepted_binops = frozenset({"*", "**", "+", "//", "%"})

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(finalize=self._printable, **kwargs)
        self._deadline = threading.local()
        self.globals["range"] = self._range
        self.globals["lipsum"] = self._lipsum
        self.filters = {k: self._bounded_call(f, k) for k, f in self.filters.items()}
        self.filters[_TICKING] = self._ticking  # unwrapped: it sizes nothing, it iterates

    def _generate(self, source: jinja2.nodes.Template, name: str | None, filename: str | None,
                  defer_init: bool = False) -> str:
        # Every `{% for %}` iterates through `_ticking`, so that a loop calling nothing (two
        # nested loops over a long string) still meets the deadline: the interval timer that
        # would stop it runs on the main thread only, and the judge and the episodes render
        # on others (nested loops over 100,000 characters ran past 15 s there, unstopped).
        for loop in source.find_all(jinja2.nodes.For):
            loop.iter = jinja2.nodes.Filter(loop.iter, _TICKING, [], [], None, None,
                                            lineno=loop.iter.lineno)
        return super()._generate(source, name, filename, defer_init)

    def _ticking(self, iterable: Any) -> Any:
        for item in iterable:
            self.tick()
            yield item

    def limit(self, problem: str) -> TemplateLimitError:
        return TemplateLimitError(f"the template {problem}")

    def tick(self) -> None:
        deadline = getattr(self._deadline, "at", None)
        if deadline is not None and time.monotonic() > deadline:
            raise self.limit(f"took over {MAX_RENDER_SECONDS:g} s to render one prompt")

    def checked(self, value: Any) -> Any:
        self.tick()
        if isinstance(value, (str, bytes, list, tuple)):
            if len(value) > MAX_VALUE_CHARS:
                raise self.limit(f"built a value of {len(value):,} items (over "
                                 f"{MAX_VALUE_CHARS:,})")
            # Values kept alive (`ns.v = ns.v + [s ~ i]`) escape the per-value cap: what one
            # render builds is counted, a string by its bytes, a list 64 bytes an item (its
            # items may be new objects, as `s|list`'s are).
            built = getattr(self._deadline, "built", 0) + (
                sys.getsizeof(value) if isinstance(value, (str, bytes)) else 64 * len(value))
            self._deadline.built = built
            if built > MAX_RENDER_BYTES:
                raise self.limit(f"built over {MAX_RENDER_BYTES:,} bytes of values in one "
                                 "render")
        return value

    def sized(self, size: int, what: str) -> None:
        """Refuses a value `what` would build of about `size` items, before it is built."""
        if size > MAX_VALUE_CHARS:
            raise self.limit(f"would build a value of about {size:,} items with {what} (over "
                             f"{MAX_VALUE_CHARS:,})")

    def operand(self, value: Any) -> Any:
        if not isinstance(value, str):
            self.sized(text_size(value), "the text of a `~` operand")
        return value

    def _printable(self, value: Any) -> Any:
        # jinja2's `finalize`: what `{{ x }}` writes, sized before str(x) writes a list's reprs
        if not isinstance(value, str):
            self.sized(text_size(value), "the text of a value it writes")
        return value

    def _check_args(self, args: tuple, kwargs: dict) -> None:
        # a size argument (`center(10**9)`, `"x".ljust(...)`, `"%9999999999s"|format`) is
        # refused before the call allocates
        for value in (*args, *kwargs.values()):
            if isinstance(value, int) and abs(value) > MAX_VALUE_CHARS:
                raise self.limit(f"passed {value:,} to a call (over {MAX_VALUE_CHARS:,})")
            if isinstance(value, str) and len(value) < 64 and any(c.isdigit() for c in value):
                digits = "".join(c if c.isdigit() else " " for c in value).split()
                if any(len(d) > 7 for d in digits):
                    raise self.limit(f"passed the format {value!r} to a call")
        self.tick()

    def _bounded_call(self, function: Any, name: str) -> Any:
        """Filter `name`: its arguments and result checked, and its input's text (for a filter
        that writes its input as text) and any result `FILTER_SIZES` predicts sized first."""
        signature = inspect.signature(function)
        skip = 1 if getattr(function, "jinja_pass_arg", None) else 0  # the context/env first

        def call(*args: Any, **kwargs: Any) -> Any:
            self._check_args(args[skip + 1:], kwargs)
            if name not in NON_TEXT_FILTERS and len(args) > skip:
                self.sized(text_size(args[skip]), f"the {name} filter's input")
            if name in FILTER_SIZES:
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                self.sized(FILTER_SIZES[name](bound.arguments), f"the {name} filter")
                args, kwargs = bound.args, bound.kwargs  # with any iterator made a list
            return self.checked(function(*args, **kwargs))
        for attribute in ("jinja_pass_arg", "__name__"):  # jinja2 passes context/env by these
            if hasattr(function, attribute):
                setattr(call, attribute, getattr(function, attribute))
        return call

    def call(self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        self._check_args(args, kwargs)
        # a str method (`format` and `format_map` come wrapped by the sandbox)
        text = getattr(getattr(__obj, "__wrapped__", __obj), "__self__", None)
        if isinstance(text, (str, bytes)) and getattr(__obj, "__name__", "") in ("encode",
                                                                                 "decode"):
            codec = _codec_of(args, kwargs)
            if codec not in TEMPLATE_CODECS:
                raise self.limit(f"called {__obj.__name__} with the codec {codec!r}; a template "
                                 f"may use {', '.join(sorted(TEMPLATE_CODECS))}")
        if isinstance(text, str):
            self._check_args((text,), {})
            predict = STR_METHOD_SIZES.get(getattr(__obj, "__name__", ""))
            if predict is not None:
                if __obj.__name__ == "join" and args:
                    args = (sized_items(args[0]), *args[1:])
                self.sized(predict(text, args, kwargs), f"str.{__obj.__name__}")
        return self.checked(super().call(__context, __obj, *args, **kwargs))

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        self.tick()
        sized = (str, bytes, list, tuple)
        if operator == "*" and isinstance(left, int) and isinstance(right, sized):
            left, right = right, left
        if operator == "*" and isinstance(left, sized) and isinstance(right, int):
            if len(left) * max(right, 0) > MAX_VALUE_CHARS:
                raise self.limit(f"repeats {len(left):,} items {right:,} times (over "
                                 f"{MAX_VALUE_CHARS:,})")
        if operator == "*" and isinstance(left, int) and isinstance(right, int):
            # one C multiplication, which no deadline stops: 2**40000 squared 14 times is a
            # 650-million-bit product, seconds to compute
            if left.bit_length() + right.bit_length() > MAX_POWER_BITS:
                raise self.limit(f"multiplies integers of {left.bit_length():,} and "
                                 f"{right.bit_length():,} bits (over {MAX_POWER_BITS:,})")
        if operator == "**" and isinstance(left, int) and isinstance(right, int) and right > 0:
            if right * math.log2(abs(left) + 1) > MAX_POWER_BITS:
                raise self.limit(f"raises {left} to the power {right:,}")
        if operator == "%" and isinstance(left, str):
            self._check_args((left,), {})
            self.sized(percent_size(left, right), "the % operator")
        return self.checked(super().call_binop(context, operator, left, right))

    def _lipsum(self, n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> Any:
        """jinja2's `lipsum`, refused before it runs past MAX_LIPSUM_WORDS words (a Python
        loop of n * max words that ticks no deadline: `lipsum(2000, max=20000)`)."""
        self._check_args((n, min, max), {})
        if n * max > MAX_LIPSUM_WORDS:
            raise self.limit(f"asked lipsum for {n:,} paragraphs of up to {max:,} words (over "
                             f"{MAX_LIPSUM_WORDS:,} words)")
        return self.checked(jinja2.utils.generate_lorem_ipsum(n, html, min, max))

    def _range(self, *args: int) -> Any:
        self._check_args(args, {})
        for i in range(*args):  # a loop over a range ticks the deadline every item
            self.tick()
            yield i

    def render(self, template: jinja2.Template, **variables: Any) -> str:
        """`template` rendered with `variables`, stopped past `MAX_OUTPUT_CHARS` or
        `MAX_RENDER_SECONDS` (and, on the main thread, an interval timer also stops
        Python code between the checks)."""
        self._deadline.at = time.monotonic() + MAX_RENDER_SECONDS
        self._deadline.built = 0  # `checked` counts this render's values, not the thread's
        timer = threading.current_thread() is threading.main_thread()
        if timer:
            def expire(signum: int, frame: Any) -> None:
                raise self.limit(f"took over {MAX_RENDER_SECONDS:g} s to render one prompt")
            previous = signal.signal(signal.SIGALRM, expire)
            signal.setitimer(signal.ITIMER_REAL, MAX_RENDER_SECONDS + 1)
        try:
            parts, size = [], 0
            for part in template.generate(**variables):
                size += len(part)
                if size > MAX_OUTPUT_CHARS:
                    raise self.limit(f"rendered over {MAX_OUTPUT_CHARS:,} characters")
                parts.append(part)
            return "".join(parts)
        finally:
            self._deadline.at = None
            if timer:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)
