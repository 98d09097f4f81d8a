"""The configuration reference (docs/reference/config.md) is generated from the schema: every
field carries a comment, and the committed page is the one the schema gives now."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

from rlvr import cli
from rlvr.config import reference
from rlvr.config.ranges import RANGES
from rlvr.config.schema import Config

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reference" / "config.md"


def test_every_schema_field_carries_a_comment():
    # The reference prints the comment as the field's description: a field added without one
    # would appear undocumented. Add a `#` comment on or above it in src/rlvr/config/schema/.
    assert reference.missing_comments() == []


def test_the_committed_page_is_the_one_the_schema_gives_now():
    # Out of date: run `make docs` (or `python -m rlvr.config.reference`) and commit the page.
    assert PAGE.read_text(encoding="utf-8") == reference.render()


def _paths(section: type, prefix: str = "") -> list[str]:
    out = []
    for name, hint in typing.get_type_hints(section).items():
        inner, in_list = reference.unwrap_hint(hint)
        out.append(prefix + name)
        if dataclasses.is_dataclass(inner):
            out += _paths(inner, f"{prefix}{name}[]." if in_list else f"{prefix}{name}.")
    return out


def test_every_field_has_a_heading_with_its_default_and_its_range():
    page = reference.render()
    sections = {}
    for block in page.split("\n#")[1:]:
        heading, _, body = block.partition("\n")
        if "`" in heading:
            sections[heading.split("`")[1]] = body
    assert set(sections) == set(_paths(Config))
    assert "default `0.2`" in sections["algorithm.clip_higher"]
    assert "`[0, 1)`" in sections["algorithm.clip_lower"]
    assert "default `\"auto\"`" in sections["model.device"]
    assert "one of `auto`, `cpu`, `cuda`" in sections["model.device"]
    assert "default `required`" in sections["data.train[].name"]
    assert "-1 keeps all" in sections["checkpoint.keep_last_n_checkpoints"]
    for path, bounds in RANGES.items():  # every declared range is printed with its field
        assert f"`{bounds}`" in sections[path], path


def test_comments_above_and_beside_a_field_are_its_description():
    source = '''
@dataclass
class Section:
    """What the section is."""

    # Above, first line
    # and second line.
    a: int = 1  # beside
    b: str = "x"

    # A block separated by a blank line belongs to no field.

    c: float = 0.5  # only beside
    d: list[int] = field(
        default_factory=list)  # on its last line
'''
    comments, docstrings, annotations = reference.source_docs(source)
    assert comments[("Section", "a")] == "Above, first line and second line. beside"
    assert comments[("Section", "b")] == ""
    assert comments[("Section", "c")] == "only beside"
    assert comments[("Section", "d")] == "on its last line"
    assert docstrings == {"Section": "What the section is."}
    assert annotations[("Section", "d")] == "list[int]"


def test_markup_in_a_comment_is_shown_as_text():
    text = reference._markdown_text("R1 format <think>..</think>; discount**t; `a*b` [0, 1)")
    assert "&lt;think&gt;" in text and "discount\\*\\*t" in text and "`a*b`" in text
    assert "\\[0, 1)" in text


def test_the_check_mode_fails_on_a_stale_page(tmp_path, capsys):
    stale = tmp_path / "config.md"
    stale.write_text("# old\n", encoding="utf-8")
    assert reference.main([str(stale), "--check"]) == 1
    assert reference.main([str(stale)]) == 0
    assert reference.main([str(stale), "--check"]) == 0


def test_rlvr_config_reference_prints_the_page(capsys):
    assert cli.main(["config", "--reference"]) == 0
    assert capsys.readouterr().out == reference.render()
