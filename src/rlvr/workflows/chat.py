"""The tokens between two turns of an episode, in the run's chat template (the tokenizer's,
or the one `data.chat_template` picks: `rlvr.data.templates`).

After a model turn, an episode appends messages (feedback, a tool's output) and opens the next
assistant turn. The model's own tokens are never re-tokenized (that could change them, and the
logprobs would no longer be of the tokens trained on); only the text between its turn and the
next is rendered and tokenized:
1. the end of the assistant turn as the template writes it (`<|im_end|>\\n` in ChatML), minus
   the end-of-turn token if the model sampled it itself (it usually stops on it);
2. the new messages and the next assistant header, as the template renders them.
Both come from rendering the conversation with and without the new part and taking the
difference, so any template that renders a conversation as a growing string works.

A new message's content is text, never control tokens: a tool that prints `<|im_end|>` or
`<|im_start|>user` must not close its turn and forge a user's. Where a content holds a
special token's text, the template's own text and the contents are tokenized apart, the
contents with `split_special_tokens=True` (the tokenizer's switch that reads such strings as
plain text: exact, the model sees the characters printed). Where none does (nearly always),
the whole text is tokenized at once, as `apply_chat_template` would: apart, a merge across a
content's edge would be lost (Qwen's `\\n\\n` after a tool's printed line). Where a content is,
the template says: rendered again with that content replaced by a stand-in, the text around
the stand-in is the template's and what lies between is the content as the template wrote it
(trimmed, JSON-quoted, ...).
"""

from __future__ import annotations

from typing import Any, Callable

from rlvr.data.templates import render_tokenizer_template

_MARK = "\u2063rlvr-turn\u2063"  # stands in for the assistant's text when locating its end
# Stands in for a new message's content: letters only, so that whatever filter a template
# applies to content (trim, tojson, escape) writes it unchanged.
_CONTENT = "RLVRxCONTENTxSTANDxIN"


Render = Callable[[list[dict], bool], str]  # (messages, add_generation_prompt) -> text


def continuation_ids(tokenizer: Any, messages: list[dict], new_messages: list[dict],
                     last_token_id: int | None, render: Render | None = None) -> list[int]:
    """Ids to append after the model's last turn (`messages[-1]`, an assistant message whose
    content is the turn's text; `last_token_id` the last token it sampled) so that the
    sequence continues with `new_messages` and a fresh assistant turn. `render` is the chat
    template's (default: the tokenizer's own). The new messages' contents become text tokens
    only (no special tokens)."""
    if render is None:  # the tokenizer's template, rendered as prompts are (bounded)
        def render(msgs: list[dict], generation_prompt: bool) -> str:
            return render_tokenizer_template(tokenizer, msgs, generation_prompt)
    if not messages or messages[-1].get("role") != "assistant":
        raise ValueError("the conversation must end with the assistant turn just sampled")
    marked = [*messages[:-1], {"role": "assistant", "content": _MARK}]
    rendered = render(marked, False)
    at = rendered.rfind(_MARK)
    if at < 0:
        raise ValueError("the chat template drops the assistant's text; multi-turn episodes "
                         "need a template that renders it")
    closing = rendered[at + len(_MARK):]  # how the template ends an assistant turn
    full = render([*marked, *new_messages], True)
    if not full.startswith(rendered):
        raise ValueError("the chat template renders earlier turns differently once more "
                         "messages follow; multi-turn episodes need a template that does not")
    tail = tokenizer.decode([last_token_id]) if last_token_id is not None else ""
    if tail and closing.startswith(tail):  # the model closed its turn itself
        closing = closing[len(tail):]
    added = full[len(rendered):]
    spans = _content_spans(render, marked, new_messages, rendered, added)
    return _encode_spans(tokenizer, closing + added,
                         [(len(closing) + start, len(closing) + end) for start, end in spans])


def _content_spans(render: Render, marked: list[dict], new_messages: list[dict],
                   rendered: str, added: str) -> list[tuple[int, int]]:
    """Where each new message's content lies in `added` (what the new messages and the next
    header add to `rendered`), in order. ValueError for a template that does not write a
    content once, in one piece, leaving the rest of the text as it is."""
    spans = []
    for i, message in enumerate(new_messages):
        if not isinstance(message.get("content"), str) or not message["content"]:
            continue  # nothing of the message's own to keep apart
        stand_in = [*new_messages[:i], {**message, "content": _CONTENT}, *new_messages[i + 1:]]
        text = render([*marked, *stand_in], True)
        written = text[len(rendered):]
        before, _, after = written.partition(_CONTENT)
        if (not text.startswith(rendered) or written.count(_CONTENT) != 1
                or len(before) + len(after) > len(added)
                or not (added.startswith(before) and added.endswith(after))):
            raise ValueError(f"the chat template does not write a {message.get('role')!r} "
                             "message's content once and as one piece, so it cannot be kept "
                             "apart from the template's own text")
        spans.append((len(before), len(added) - len(after)))
    if any(a[1] > b[0] for a, b in zip(spans, spans[1:])):
        raise ValueError("the chat template writes new messages out of order")
    return spans


def _encode_spans(tokenizer: Any, text: str, spans: list[tuple[int, int]]) -> list[int]:
    """`text` tokenized with special tokens read where the template wrote them, and as plain
    text inside `spans` (the contents)."""
    specials = _special_strings(tokenizer)
    if not any(s in text[start:end] for start, end in spans for s in specials):
        return tokenizer.encode(text, add_special_tokens=False)
    ids: list[int] = []
    at = 0
    for start, end in [*spans, (len(text), len(text))]:
        if at < start:
            ids += tokenizer.encode(text[at:start], add_special_tokens=False)
        if start < end:
            # A per-call switch, though a fast tokenizer keeps it as a setting it changes on
            # each call: no other thread encodes with the run's tokenizer while episodes run.
            ids += tokenizer.encode(text[start:end], add_special_tokens=False,
                                    split_special_tokens=True)
        at = end
    return ids


def _special_strings(tokenizer: Any) -> set[str]:
    """The text of every special token: `all_special_tokens` leaves out some that are special
    in the vocabulary (ChatML's `<|im_start|>` in the tiny tokenizer)."""
    added = getattr(tokenizer, "added_tokens_decoder", {})
    return ({t.content for t in added.values() if getattr(t, "special", False)}
            | set(getattr(tokenizer, "all_special_tokens", ())))


def check_turns(tokenizer: Any, render: Render | None = None,
                roles: tuple[str, ...] = ("user",)) -> None:
    """ValueError if the chat template cannot write the turns of a multi-turn episode: a
    message of each of `roles` after an assistant turn (`user` for feedback, `tool` for a
    tool's output). Tried at start on a short conversation, so a template that cannot fails
    before any model loads."""
    asked = [{"role": "user", "content": "1 + 1?"},
             {"role": "assistant", "content": "```python\nprint(1 + 1)\n```"}]
    for role in roles:
        try:
            continuation_ids(tokenizer, asked, [{"role": role, "content": "2"}], None, render)
        except Exception as e:  # a template file is the user's code: any failure is theirs
            raise ValueError(f"it cannot write a {role!r} turn after the assistant's, as a "
                             f"multi-turn episode does: {e}") from e
