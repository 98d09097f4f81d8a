"""IFEval's layout families: detectable_content, detectable_format and combination.

Each follows the matching rules of IFEval's checker (see `constraints`), written afresh. Where
the reference's regular expression would backtrack quadratically on a hostile answer (bullets,
titles, placeholders), the same rule is applied line by line instead. None renders markdown.
"""

from __future__ import annotations

import json
import re

from rlvr.rewards.ifeval.constraints import as_count, register_constraint, split_between

# --- detectable_content -----------------------------------------------------------------------

def placeholders(response: str) -> list[str]:
    """What lies inside each square-bracket pair, paired as IFEval's `\\[.*?\\]` pairs them:
    from a "[" to the first "]" after it on the same line ("[a [b]" is one, holding "a [b").

    Found by searching rather than by that regex, which rescans to the end of the line from
    every "[" that has no "]" after it: quadratic on "[" * 50000.
    """
    found = []
    for line in response.split("\n"):
        start = line.find("[")
        while start >= 0:
            end = line.find("]", start + 1)
            if end < 0:
                break  # no later "[" on this line has a "]" after it either
            found.append(line[start + 1:end])
            start = line.find("[", end + 1)
    return found


@register_constraint("detectable_content:number_placeholders")
def number_placeholders(response: str, *, num_placeholders: int) -> bool:
    """At least `num_placeholders` square-bracket placeholders like [name]. An empty pair ("[]",
    "[ ]") is no placeholder here, though IFEval counts it."""
    found = sum(1 for inside in placeholders(response) if inside.strip())
    return found >= as_count(num_placeholders, "num_placeholders")


# IFEval's two markers, each allowing one space after an inner dot; "P.S." needs its final dot.
_MARKERS = {"P.S.": re.compile(r"p\.\s?s\."), "P.P.S": re.compile(r"p\.\s?p\.\s?s")}


@register_constraint("detectable_content:postscript")
def postscript(response: str, *, postscript_marker: str) -> bool:
    """The marker ("P.S.", "P.P.S", or any other, literally) appears, any case, anywhere: IFEval
    does not ask for it at the start of a line."""
    marker = postscript_marker.strip()
    if not marker:
        raise ValueError("postscript_marker is empty")
    pattern = _MARKERS.get(marker) or re.compile(re.escape(marker.lower()))
    return pattern.search(response.lower()) is not None


# --- detectable_format ------------------------------------------------------------------------

def count_bullets(response: str) -> int:
    """Bullet lines as IFEval counts them: a line whose first non-space character is `-` (so a
    "---" rule or "-5" counts), or is `*` followed by anything but another `*` ("*item" counts,
    "**bold**" does not).

    IFEval's regexes (`^\\s*\\*[^\\*].*$`, `^\\s*-.*$`) applied line by line: `^\\s*`
    rescans every blank line after it, which is quadratic on "\\n" * 50000. One quirk is kept:
    a lone `*` takes the line after it as its text, so that line is no `*` bullet itself.
    """
    lines = response.split("\n")
    count, skip_star = 0, False
    for i, line in enumerate(lines):
        text = line.lstrip()
        if text.startswith("-"):
            count += 1
        if skip_star:
            skip_star = False
        elif text[:1] == "*" and text[1:2] != "*":
            if text[1:]:
                count += 1
            elif i + 1 < len(lines):  # "*" then the newline itself as the non-star character
                count += 1
                skip_star = True
    return count


@register_constraint("detectable_format:number_bullet_lists")
def number_bullet_lists(response: str, *, num_bullets: int) -> bool:
    """Exactly `num_bullets` markdown bullet points (see `count_bullets`)."""
    return count_bullets(response) == as_count(num_bullets, "num_bullets")


CONSTRAINED_RESPONSES = ("My answer is yes.", "My answer is no.", "My answer is maybe.")
# Any spelling of an answer the response gives: "my answer is No," counts as "no".
_GIVEN_ANSWER = re.compile(r"\bmy answer is (yes|no|maybe)\b", re.IGNORECASE)


@register_constraint("detectable_format:constrained_response")
def constrained_response(response: str) -> bool:
    """The response gives one of IFEval's three fixed answers, and only one. IFEval pays any
    response containing one, so all three together ("My answer is yes. My answer is no. My
    answer is maybe.") scored 1, a hedge beating every committed answer; here a response that
    also gives another ("my answer is no," in any case or punctuation) fails. Repeating the
    same answer is fine."""
    if not any(option in response for option in CONSTRAINED_RESPONSES):
        return False
    return len({given.lower() for given in _GIVEN_ANSWER.findall(response)}) == 1


# IFEval's two scans, each pairing stars left to right within a line. Both are linear: a failed
# start gives back only the run it read, which no later start rereads.
_SINGLE_STARS = re.compile(r"\*[^\n*]*\*")
_DOUBLE_STARS = re.compile(r"\*\*[^\n*]*\*\*")


@register_constraint("detectable_format:number_highlighted_sections")
def number_highlighted_sections(response: str, *, num_highlights: int) -> bool:
    """At least `num_highlights` markdown-highlighted spans such as *important part*, counted as
    IFEval counts them: the `*...*` pairs with something besides spaces inside, plus the
    `**...**` pairs likewise (so "* not one*" counts, and "**bold**" once)."""
    found = sum(1 for h in _SINGLE_STARS.findall(response) if h[1:-1].strip())
    found += sum(1 for h in _DOUBLE_STARS.findall(response) if h[2:-2].strip())
    return found >= as_count(num_highlights, "num_highlights")


@register_constraint("detectable_format:multiple_sections")
def multiple_sections(response: str, *, section_spliter: str, num_sections: int) -> bool:
    """At least `num_sections` section headers "<spliter> <number>" (e.g. "SECTION 1"): case as
    given, at most one whitespace character before the number, anywhere in the text."""
    spliter = section_spliter.strip()
    if not spliter:
        raise ValueError("section_spliter is empty")
    headers = re.findall(rf"{re.escape(spliter)}\s?\d+", response)
    return len(headers) >= as_count(num_sections, "num_sections")


_FENCE_OPENINGS = ("```json", "```Json", "```JSON", "```")  # IFEval's, tried in this order


@register_constraint("detectable_format:json_format")
def json_format(response: str) -> bool:
    """The whole response is JSON, optionally inside a ```json (or bare ```) fence; a fence
    labelled otherwise ("```javascript") is not removed, so the text is no JSON."""
    text = response.strip()
    for opening in _FENCE_OPENINGS:
        text = text.removeprefix(opening)
    text = text.removesuffix("```").strip()
    try:
        json.loads(text)
    except (ValueError, RecursionError):  # "[" * 20000 nests deeper than the parser recurses
        return False
    return True


@register_constraint("detectable_format:title")
def title(response: str) -> bool:
    """A title in double angular brackets, such as <<poem of joy>>, with text inside.

    IFEval's `<<[^\\n]+>>` is greedy and backtracks from each "<<": line by line, it runs from
    the first "<<" to the last ">>" of the line, and matches if one character or more lies
    between. Searching for the two ends directly keeps "<<" * 50000 linear.
    """
    for line in response.split("\n"):
        start, end = line.find("<<"), line.rfind(">>")
        if start >= 0 and end >= start + 3 and line[start:end + 2].strip("<>").strip():
            return True
    return False


# --- combination ------------------------------------------------------------------------------

@register_constraint("combination:two_responses")
def two_responses(response: str) -> bool:
    """Two different, non-empty responses separated by six asterisks `******` (every run of six
    splits, as in IFEval, so "************" leaves an empty response between)."""
    parts = split_between(response.split("******"))
    return parts is not None and len(parts) == 2 and parts[0].strip() != parts[1].strip()


@register_constraint("combination:repeat_prompt")
def repeat_prompt(response: str, *, prompt_to_repeat: str) -> bool:
    """The response opens by repeating the request character for character (case and outer
    whitespace aside; a changed space or line break inside is a change)."""
    prompt = prompt_to_repeat.strip().lower()
    if not prompt:
        raise ValueError("prompt_to_repeat is empty")
    return response.strip().lower().startswith(prompt)
