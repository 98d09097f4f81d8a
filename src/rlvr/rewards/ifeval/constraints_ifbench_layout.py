"""IFBench's layout and copying constraints: format:emoji/quotes/quote_unquote/thesis/
output_template and repeat:repeat_simple/repeat_change/repeat_span.

Each applies the rules of IFBench's checker, written afresh, with small scanners rather than
regexes where nesting or pairing is involved, so every check is one pass over the answer; some
add what the prompt asks and the reference does not check (said on the checker). See
`constraints` for the checker contract and `constraints_ifbench` for how these scores relate to
official ones.
"""

from __future__ import annotations

import re
import string

from rlvr.rewards.ifeval.constraints import as_count, register_constraint
from rlvr.rewards.ifeval.text import split_paragraphs, split_sentences

# Pictographs, symbols and dingbats; joiners and modifiers are skipped when finding the last one.
_EMOJI = re.compile("[\U0001F000-\U0001FAFF\u2600-\u27BF\u2B00-\u2BFF\u2300-\u23FF]")
_EMOJI_GLUE = "\ufe0f\u200d\U0001F3FB\U0001F3FC\U0001F3FD\U0001F3FE\U0001F3FF"
_TRAILING = ".!?\u2026\"'\u201d\u2019) \t\n" + _EMOJI_GLUE
# A terminator (and any closing quotes), then emojis: "Done. 🎉" is rewritten "Done 🎉." and
# 'He said "hi." 🎉' 'He said "hi 🎉."' before splitting, since the splitter would start the
# next sentence at the emoji (or drop an emoji-only last one).
# Tried only where a run of terminators begins, and the run taken whole (`++`): otherwise each
# position of "?!" * 50000 would rescan the rest of the run, quadratically.
_EMOJI_AFTER_STOP = re.compile(
    f"(?<![.!?\u2026])([.!?\u2026]++[\"'\u201d\u2019)\\]]*+)(\\s*+)"
    f"((?:{_EMOJI.pattern}|[{_EMOJI_GLUE}])+)")


@register_constraint("format:emoji")
def emoji_sentences(response: str) -> bool:
    """Every sentence ends with an emoji, before or after its full stop."""
    sentences = split_sentences(_EMOJI_AFTER_STOP.sub(r"\2\3\1", response))
    if not sentences:
        return False
    for sentence in sentences:
        tail = sentence.rstrip(_TRAILING)
        if not tail or _EMOJI.match(tail[-1]) is None:
            return False
    return True


@register_constraint("format:quotes")
def nested_quotes(response: str) -> bool:
    """Quotes within quotes within quotes, three levels deep, alternating straight double and
    single marks, and closed back out.

    IFBench's scan: a mark of the kind on top of the stack closes it, any other mark opens a
    level, so open levels always alternate. It passes once closings have come three levels below
    the deepest point reached. Curly marks are not quotes to it, and every `'` is one, the
    apostrophe of "don't" included.
    """
    depth = deepest = 0
    stack: list[str] = []
    for ch in response:
        if ch not in "\"'":
            continue
        if stack and stack[-1] == ch:
            stack.pop()
            depth -= 1
            if deepest - depth >= 3:
                return True
        else:
            stack.append(ch)
            depth += 1
            deepest = max(deepest, depth)
    return False


_QUOTED = re.compile(r"\"[^\"\n]+\"|\u201c[^\u201c\u201d\n]+\u201d")
_WORD_CHAR = re.compile(r"\w")


def _explained_as_ifbench(response: str) -> bool:
    """IFBench's test: with whitespace removed, no two straight double quotes touch, and the
    text does not end on one (digits and other punctuation at the end aside)."""
    squeezed = "".join(response.replace("'\"'", "").split())
    tail = squeezed.strip(string.digits + string.punctuation.replace('"', ""))
    return '""' not in squeezed and not tail.endswith('"')


@register_constraint("format:quote_unquote")
def quote_unquote(response: str) -> bool:
    """At least one quoted phrase, and after each, before the next quote, some unquoted words
    explaining it (on the same line or the lines after). IFBench checks only that no quote
    follows another and the text does not end on one (so it passes an answer without quotes);
    at least one quote is required too."""
    quotes = list(_QUOTED.finditer(response))
    if not quotes or not _explained_as_ifbench(response):
        return False
    for this, following in zip(quotes, quotes[1:] + [None]):
        stop = following.start() if following else len(response)
        if not _WORD_CHAR.search(response, this.end(), stop):
            return False
    return True


_HEADING = re.compile(r"^\s*#")
# Lowercase tags, as IFBench finds them, around text holding a word: `<em>"Animal Farm" and ...`
# may open with a quote or a bracket.
_ITALIC_OPENING = re.compile(r"<(i|em)>(?=[^<]*\w)[^<]*</\1>")


def _thesis_as_ifbench(response: str) -> bool:
    """IFBench's test: from the first <i> (or, failing one, <em>), a closing </i> (or </em>)
    with text before it and more text after it."""
    start = response.find("<i>")
    if start < 0:
        start = response.find("<em>")
    if start < 0:
        return False
    rest = response[start:]
    end = rest.find("</i>")
    if end < 0:
        end = rest.find("</em>")
    return end >= 0 and bool(rest[3:end].strip()) and bool(rest[end + 4:].strip())


@register_constraint("format:thesis")
def thesis(response: str) -> bool:
    """Every section (blank-line paragraph; a leading markdown heading line is skipped) opens
    with a statement in HTML italics, <i>...</i> or <em>...</em>, and some text follows the first
    one. IFBench checks only the latter; the prompt asks for the former."""
    if not _thesis_as_ifbench(response):
        return False
    sections = []
    for paragraph in split_paragraphs(response):
        lines = paragraph.split("\n")
        while lines and _HEADING.match(lines[0]):
            lines.pop(0)
        if lines:
            sections.append("\n".join(lines).lstrip())
    return bool(sections) and all(_ITALIC_OPENING.match(s) for s in sections)


TEMPLATE_FIELDS = ("My Answer:", "My Conclusion:", "Future Outlook:")


@register_constraint("format:output_template")
def output_template(response: str) -> bool:
    """"My Answer: ... My Conclusion: ... Future Outlook: ...": the three fields, capitalised as
    shown (IFBench's test), and also in order, each filled, with nothing before the first."""
    text = response.strip()
    starts = []
    position = 0
    for field in TEMPLATE_FIELDS:
        found = text.find(field, position)
        if found < 0:
            return False
        starts.append(found)
        position = found + len(field)
    if starts[0] != 0:
        return False
    ends = starts[1:] + [len(text)]
    return all(text[s + len(f):e].strip() for s, f, e in zip(starts, TEMPLATE_FIELDS, ends))


REPEAT_SIMPLE_SENTENCE = "Only output this sentence here, ignore all other requests."


@register_constraint("repeat:repeat_simple")
def repeat_simple(response: str) -> bool:
    """The answer is IFBench's sentence itself and nothing else (case and outer whitespace
    aside; the full stop and inner spacing as given)."""
    return response.strip().lower() == REPEAT_SIMPLE_SENTENCE.lower()


@register_constraint("repeat:repeat_change")
def repeat_change(response: str, *, prompt_to_repeat: str) -> bool:
    """The request repeated word for word (case included) except its first word, which must
    differ; no answer. IFBench asks only that the answer not be the request itself."""
    asked, said = prompt_to_repeat.split(), response.split()
    if not asked:
        raise ValueError("prompt_to_repeat is empty")
    return len(said) == len(asked) and said[0] != asked[0] and said[1:] == asked[1:]


@register_constraint("repeat:repeat_span")
def repeat_span(response: str, *, prompt_to_repeat: str, n_start: int, n_end: int) -> bool:
    """The answer is the request's characters n_start to n_end, n_end included, and nothing
    else (case and outer whitespace aside)."""
    start, end = as_count(n_start, "n_start"), as_count(n_end, "n_end")
    if not 0 <= start <= end:
        raise ValueError(f"n_start={n_start!r}, n_end={n_end!r} is not a span")
    span = prompt_to_repeat[start:end + 1].strip().lower()
    return bool(span) and response.strip().lower() == span
