"""The documentation site (mkdocs.yml, docs/) and the README hold together: the site builds
strictly (where mkdocs is installed: the `docs` extra, which `make setup` installs), every page
is in the navigation, every public name and every command is documented, the README stays a
short door with working links."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import rlvr
from rlvr.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _nav_pages(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [p for v in node.values() for p in _nav_pages(v)]
    return [p for item in node for p in _nav_pages(item)]


def test_every_page_is_in_the_navigation_and_every_entry_exists():
    nav = _nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"])
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert sorted(set(nav)) == sorted(pages)
    assert len(nav) == len(set(nav)), "a page is listed twice"


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None,
                    reason="mkdocs is not installed (pip install -e '.[docs]'; make setup does)")
def test_the_site_builds_strictly_and_offline(tmp_path):
    # strict: a broken link or anchor, a missing page, a page left out of the navigation fails.
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                           "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    # No font, script or stylesheet from another host: the site works without a network.
    external = re.findall(r'<(?:link|script)[^>]+(?:href|src)="(https?://[^"]+)"', index)
    assert external == []
    api = (tmp_path / "site" / "reference" / "api.html").read_text(encoding="utf-8")
    # The docstrings themselves, read from the source by mkdocstrings (not only the names).
    assert "merged in order" in api and "register_verifier" in api


def test_every_public_name_is_rendered_on_the_api_page():
    page = (DOCS / "reference" / "api.md").read_text(encoding="utf-8")
    rendered = set(re.findall(r"^::: ([\w.]+)$", page, re.M))
    assert rendered == {f"{rlvr._EXPORTS[name]}.{name}" for name in rlvr.__all__}


def test_every_command_is_on_the_cli_page():
    page = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    commands = build_parser()._subparsers._group_actions[0].choices
    missing = [name for name in commands if f"rlvr {name}" not in page]
    assert missing == []


def test_the_readme_is_short_and_its_links_work():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 250
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    local = [link.split("#")[0] for link in links if not re.match(r"^[a-z]+://", link)]
    assert [link for link in local if link and not (ROOT / link).exists()] == []
    assert sum(link.startswith("docs/") for link in local) >= 5  # a door into the docs
    for command in ("make train", "make test"):
        assert command in readme
