"""IFBench's layout and copying constraints: format:emoji/quotes/quote_unquote/thesis/
output_template and repeat:repeat_simple/repeat_change/repeat_span.

Written afresh from the prompts' wording, with small scanners rather than regexes where nesting
or pairing is involved, so every check is one pass over the answer. See `constraints` for the
checker contract and `constraints_ifbench` for how these scores relate to official ones.
"""

from __future__ import annotations

import re

from rlvr.rewards.ifeval.constraints import as_count, register_constraint
from rlvr.rewards.ifeval.text import split_paragraphs, split_sentences

# Pictographs, symbols and dingbats; joiners and modifiers are skipped when finding the last one.
_EMOJI = re.compile("[\U0001F000-\U0001FAFF\u2600-\u27BF\u2B00-\u2BFF\u2300-\u23FF]")
_EMOJI_GLUE = "\ufe0f\u200d\U0001F3FB\U0001F3FC\U0001F3FD\U0001F3FE\U0001F3FF"
_TRAILING = ".!?\u2026\"'\u201d\u2019) \t\n" + _EMOJI_GLUE
# A terminator, then emojis: "Done. 🎉" is rewritten "Done 🎉." before splitting, since the
# splitter would start the next sentence at the emoji (or drop an emoji-only last one).
_EMOJI_AFTER_STOP = re.compile(f"([.!?\u2026]+)(\\s*)((?:{_EMOJI.pattern}|[{_EMOJI_GLUE}])+)")


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


_DOUBLE = '"\u201c\u201d'  # straight and curly marks alike: only the kind matters here
_SINGLE = "'\u2018\u2019"


def _quote_kind(text: str, i: int) -> str:
    """'"' or "'" if the character at i is a quotation mark; "" otherwise. An apostrophe
    between two letters ("don't") is not a quote."""
    ch = text[i]
    if ch in _DOUBLE:
        return '"'
    if ch in _SINGLE:
        inside_word = 0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum()
        return "" if inside_word else "'"
    return ""


@register_constraint("format:quotes")
def nested_quotes(response: str) -> bool:
    """Quotes within quotes within quotes, three levels, alternating double and single marks.

    A mark of the kind on top of the stack closes it, any other mark opens a level; so the open
    levels always alternate and depth 3 means the nesting was reached.
    """
    stack: list[str] = []
    for i in range(len(response)):
        kind = _quote_kind(response, i)
        if not kind:
            continue
        if stack and stack[-1] == kind:
            stack.pop()
        else:
            stack.append(kind)
            if len(stack) >= 3:
                return True
    return False


_QUOTED = re.compile(r"\"[^\"\n]+\"|\u201c[^\u201c\u201d\n]+\u201d")
_WORD_CHAR = re.compile(r"\w")


@register_constraint("format:quote_unquote")
def quote_unquote(response: str) -> bool:
    """At least one quoted phrase, and after each, before the next quote or the line's end, some
    unquoted words explaining it."""
    quotes = list(_QUOTED.finditer(response))
    if not quotes:
        return False
    for this, following in zip(quotes, quotes[1:] + [None]):
        stop = following.start() if following else len(response)
        line_end = response.find("\n", this.end(), stop)
        if not _WORD_CHAR.search(response, this.end(), stop if line_end < 0 else line_end):
            return False
    return True


_HEADING = re.compile(r"^\s*#")
_ITALIC_OPENING = re.compile(r"<(i|em)>\s*\w[^<]*</\1>", re.IGNORECASE)


@register_constraint("format:thesis")
def thesis(response: str) -> bool:
    """Every section (blank-line paragraph; a leading markdown heading line is skipped) opens
    with a statement in HTML italics, <i>...</i> or <em>...</em>."""
    sections = []
    for paragraph in split_paragraphs(response):
        lines = paragraph.split("\n")
        while lines and _HEADING.match(lines[0]):
            lines.pop(0)
        if lines:
            sections.append("\n".join(lines).lstrip())
    return bool(sections) and all(_ITALIC_OPENING.match(s) for s in sections)


TEMPLATE_FIELDS = ("my answer:", "my conclusion:", "future outlook:")


@register_constraint("format:output_template")
def output_template(response: str) -> bool:
    """"My Answer: ... My Conclusion: ... Future Outlook: ...": the three fields in order, each
    filled, nothing before the first (case aside)."""
    text = response.strip().lower()
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


def _normalized(text: str) -> str:
    return " ".join(text.split()).lower()


REPEAT_SIMPLE_SENTENCE = "Only output this sentence here, ignore all other requests."


@register_constraint("repeat:repeat_simple")
def repeat_simple(response: str) -> bool:
    """The answer is IFBench's sentence itself and nothing else (case and final stop aside)."""
    return _normalized(response).rstrip(".") == _normalized(REPEAT_SIMPLE_SENTENCE).rstrip(".")


@register_constraint("repeat:repeat_change")
def repeat_change(response: str, *, prompt_to_repeat: str) -> bool:
    """The request repeated word for word except its first word, which must differ; no answer."""
    asked, said = _normalized(prompt_to_repeat).split(), _normalized(response).split()
    if not asked:
        raise ValueError("prompt_to_repeat is empty")
    return len(said) == len(asked) and said[0] != asked[0] and said[1:] == asked[1:]


@register_constraint("repeat:repeat_span")
def repeat_span(response: str, *, prompt_to_repeat: str, n_start: int, n_end: int) -> bool:
    """The answer is the request's span from n_start to n_end and nothing else.

    The prompt says the indices count characters and that n_end is included; the official
    checker slices words, n_end excluded. A model following the prompt should not lose to the
    scorer's reading, nor the other way round, so the character span (with or without n_end) and
    the word span all pass.
    """
    start, end = as_count(n_start, "n_start"), as_count(n_end, "n_end")
    if not 0 <= start <= end:
        raise ValueError(f"n_start={n_start!r}, n_end={n_end!r} is not a span")
    said = _normalized(response)
    spans = (prompt_to_repeat[start:end], prompt_to_repeat[start:end + 1],
             " ".join(prompt_to_repeat.split()[start:end]))
    return bool(said) and said in {_normalized(span) for span in spans}
