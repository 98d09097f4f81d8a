"""IFEval's layout families: detectable_content, detectable_format and combination.

Markdown-based checks read the response line by line with small regular expressions; none
renders markdown. See `constraints` for the checker contract.
"""

from __future__ import annotations

import json
import re

from rlvr.rewards.ifeval.constraints import as_count, register_constraint

# --- detectable_content -----------------------------------------------------------------------

# A placeholder such as [address]: square brackets around something, on one line. Emptiness is
# tested after matching: `\[[^\]]*\S[^\]]*\]` would backtrack quadratically on an unclosed "[".
_BRACKETED = re.compile(r"\[([^\[\]\n]*)\]")


@register_constraint("detectable_content:number_placeholders")
def number_placeholders(response: str, *, num_placeholders: int) -> bool:
    """At least `num_placeholders` square-bracket placeholders like [name]."""
    found = sum(1 for inside in _BRACKETED.findall(response) if inside.strip())
    return found >= as_count(num_placeholders, "num_placeholders")


@register_constraint("detectable_content:postscript")
def postscript(response: str, *, postscript_marker: str) -> bool:
    """A line starts with the marker ("P.S.", "P.P.S"), any case, spaces after its dots allowed.

    A marker's final dot is optional, so "P.S" satisfies "P.S.".
    """
    marker = postscript_marker.strip().rstrip(".")
    if not marker:
        raise ValueError("postscript_marker is empty")
    body = r"\.\s*".join(re.escape(part) for part in marker.split("."))
    # `[^\w\n]*`, not `\W*`: `\W` matches newlines, so on "\n" * 50000 every line start would
    # scan to the end of the text.
    return re.search(rf"^[^\w\n]*{body}", response, re.IGNORECASE | re.MULTILINE) is not None


# --- detectable_format ------------------------------------------------------------------------

# A markdown bullet: `*` or `-` then a space. "**bold**" and "---" rules are not bullets.
_BULLET = re.compile(r"^[ \t]*[*-][ \t]+\S", re.MULTILINE)


@register_constraint("detectable_format:number_bullet_lists")
def number_bullet_lists(response: str, *, num_bullets: int) -> bool:
    """Exactly `num_bullets` markdown bullet points."""
    return len(_BULLET.findall(response)) == as_count(num_bullets, "num_bullets")


CONSTRAINED_RESPONSES = ("My answer is yes.", "My answer is no.", "My answer is maybe.")


@register_constraint("detectable_format:constrained_response")
def constrained_response(response: str) -> bool:
    """The response gives one of IFEval's three fixed answers."""
    return any(option in response for option in CONSTRAINED_RESPONSES)


# *highlighted* or **highlighted**: the text inside does not start or end with a space, so
# "* item with *emphasis*" counts one highlight, not "* item with *".
_HIGHLIGHT = re.compile(r"(?<!\*)(\*\*?)(?=[^\s*])([^\n*]*[^\s*])?\1(?!\*)")


@register_constraint("detectable_format:number_highlighted_sections")
def number_highlighted_sections(response: str, *, num_highlights: int) -> bool:
    """At least `num_highlights` markdown-highlighted spans such as *important part*."""
    return len(_HIGHLIGHT.findall(response)) >= as_count(num_highlights, "num_highlights")


@register_constraint("detectable_format:multiple_sections")
def multiple_sections(response: str, *, section_spliter: str, num_sections: int) -> bool:
    """At least `num_sections` section headers "<spliter> <number>" (e.g. "SECTION 1")."""
    spliter = section_spliter.strip()
    if not spliter:
        raise ValueError("section_spliter is empty")
    headers = re.findall(rf"(?<!\w){re.escape(spliter)}\s*\d+", response)
    return len(headers) >= as_count(num_sections, "num_sections")


_CODE_FENCE = re.compile(r"^```[\w-]*[ \t]*\n?(.*?)\n?```$", re.DOTALL)


@register_constraint("detectable_format:json_format")
def json_format(response: str) -> bool:
    """The whole response is JSON, optionally in one markdown code fence."""
    text = response.strip()
    fenced = _CODE_FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        json.loads(text)
    except (ValueError, RecursionError):  # "[" * 20000 nests deeper than the parser recurses
        return False
    return True


_TITLE = re.compile(r"<<([^\n<>]*)>>")  # emptiness tested after matching, as for placeholders


@register_constraint("detectable_format:title")
def title(response: str) -> bool:
    """A title in double angular brackets, such as <<poem of joy>>, with text inside."""
    return any(inside.strip() for inside in _TITLE.findall(response))


# --- combination ------------------------------------------------------------------------------

@register_constraint("combination:two_responses")
def two_responses(response: str) -> bool:
    """Two different, non-empty responses separated by six asterisks `******`."""
    parts = [p.strip() for p in re.split(r"(?<!\*)\*{6}(?!\*)", response)]
    while parts and not parts[0]:  # a separator before the first or after the last is allowed
        parts.pop(0)
    while parts and not parts[-1]:
        parts.pop()
    return len(parts) == 2 and all(parts) and parts[0] != parts[1]


@register_constraint("combination:repeat_prompt")
def repeat_prompt(response: str, *, prompt_to_repeat: str) -> bool:
    """The response opens by repeating the request word for word (case and outer space aside)."""
    prompt = " ".join(prompt_to_repeat.split()).lower()
    if not prompt:
        raise ValueError("prompt_to_repeat is empty")
    return " ".join(response.split()).lower().startswith(prompt)
