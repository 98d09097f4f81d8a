"""What the bad-input tests share: `rlvr ARGS` refused with one line naming the problem."""

from __future__ import annotations

from rlvr.cli import main


def fails_in_one_line(capsys, args: list[str], *expected: str, code: int = 2) -> str:
    """`rlvr ARGS` exits `code` with one `rlvr: ` line on stderr, no traceback, holding every
    `expected` text; returns that line."""
    assert main(args) == code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("rlvr: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]
