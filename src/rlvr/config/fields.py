"""A config field's facts beside its declaration: `ranged(default, Range(...))` gives a numeric
field its admitted range, `choice(default, {...})` a string field its admitted values, both kept
in the dataclass field's metadata. The schema (`rlvr.config.schema`) is then the one home of a
field's type, default, range, choices and meaning (its comment); the range and choice checks
(`rlvr.config.ranges`) and the generated reference (`rlvr.config.reference`) read them from
there, so nothing is written twice.

Paths are those of the config tree; a field of a list of sections is written with `[]`
(`data.train[].weight`). A value of null (where the schema allows it) is not checked; a list
of numbers is checked element by element. Rules that tie several fields together stay in
`rlvr.config.checks`. A leaf: imports nothing from rlvr.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

RANGE_KEY, CHOICES_KEY = "rlvr_range", "rlvr_choices"  # dataclass field metadata keys


class ConfigError(ValueError):
    """A config that cannot work; the message names the offending field(s)."""


def ranged(default: Any, bounds: "Range") -> Any:
    """A numeric field whose values must lie in `bounds` (null, where the type allows it, is
    not a number and is not checked; a list's numbers are checked one by one). `default` is
    the value, or `field(default_factory=...)` for a list."""
    return _with(default, {RANGE_KEY: bounds})


def choice(default: Any, allowed: set | frozenset | list | tuple) -> Any:
    """A field that must hold one of `allowed`."""
    return _with(default, {CHOICES_KEY: tuple(sorted(allowed, key=str))})


def _with(default: Any, metadata: dict) -> Any:
    if isinstance(default, dataclasses.Field):  # a mutable default, made by its factory
        return dataclasses.field(default_factory=default.default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Range:
    """An interval of admitted numbers, each end closed or open or absent, plus any lone
    values admitted besides (`also`: -1 in "-1 or >= 1"). Infinities and NaN are refused unless
    `finite` is false. `why` is appended to the message of a value out of range."""

    low: float | None = None  # None: no lower bound
    high: float | None = None  # None: no upper bound
    low_open: bool = False  # True: `low` itself is refused
    high_open: bool = False
    also: tuple[float, ...] = ()
    finite: bool = True
    why: str = ""

    def admits(self, value: float) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if value in self.also:
            return True
        if not fits_a_float(value):  # a 401-digit integer: no bound of ours is that wide
            return False
        if math.isnan(value) or (self.finite and math.isinf(value)):
            return False
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return self.high is None or not (value > self.high
                                          or (self.high_open and value == self.high))

    def __str__(self) -> str:
        if self.low is None and self.high is None:
            text = "finite" if self.finite else "any number"
        elif self.high is None:
            text = f"{'>' if self.low_open else '>='} {_num(self.low)}"
        elif self.low is None:
            text = f"{'<' if self.high_open else '<='} {_num(self.high)}"
        else:
            text = (f"{'(' if self.low_open else '['}{_num(self.low)}, {_num(self.high)}"
                    f"{')' if self.high_open else ']'}")
        return " or ".join([*(_num(v) for v in self.also), text])


def fits_a_float(value: float) -> bool:
    """Whether `value` converts to a float (a Python int may have any number of digits;
    `math.isnan` and every float computation raise OverflowError past 1.8e308)."""
    try:
        float(value)
    except OverflowError:
        return False
    return True


def _num(x: float | None) -> str:
    return str(int(x)) if isinstance(x, float) and x.is_integer() else str(x)


# The usual ranges, by what they read as.
POSITIVE = Range(low=0, low_open=True)  # > 0: sizes, timeouts, rates
NON_NEGATIVE = Range(low=0)  # >= 0: counts where 0 means "off" or "none"
AT_LEAST_ONE = Range(low=1)  # >= 1: counts that must hold something
FRACTION = Range(low=0, high=1)  # [0, 1]
UNIT_OPEN_HIGH = Range(low=0, high=1, high_open=True)  # [0, 1): clip ranges, Adam betas, dropout
UNIT_OPEN_LOW = Range(low=0, high=1, low_open=True)  # (0, 1]: top_p, shares of a device
ANY_FINITE = Range()  # any finite number (a reward value, which may be negative)
# Seconds a wait may last. A week bounds it: past threading.TIMEOUT_MAX (about 292 years here)
# waits raise OverflowError, and deadlines of now + 1e10 s overflow clocks ("timestamp too
# large"), both only when the wait starts, after the run directory is written.
WEEK_S = 7 * 24 * 3600
TIMEOUT = Range(low=0, low_open=True, high=WEEK_S, why="seconds, at most a week")
MIN_TEMPERATURE = 0.01


# Sampling temperatures. vLLM raises a temperature in (0, 0.01) to 0.01 ("may cause numerical
# errors nan or inf"), so its samples would not be drawn at the temperature the learner divides
# by; and logits over a tiny temperature overflow float32 (1e-320: inf logits, NaN probabilities).
SAMPLED = Range(low=MIN_TEMPERATURE, why="training samples are drawn, not greedy; vLLM raises "
                "lower ones to 0.01")
GREEDY_OR_SAMPLED = Range(low=MIN_TEMPERATURE, also=(0,), why="0 is greedy; vLLM raises lower "
                          "ones to 0.01")
