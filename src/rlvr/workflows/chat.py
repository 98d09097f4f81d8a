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
"""

from __future__ import annotations

from typing import Any, Callable

_MARK = "\u2063rlvr-turn\u2063"  # stands in for the assistant's text when locating its end


Render = Callable[[list[dict], bool], str]  # (messages, add_generation_prompt) -> text


def continuation_ids(tokenizer: Any, messages: list[dict], new_messages: list[dict],
                     last_token_id: int | None, render: Render | None = None) -> list[int]:
    """Ids to append after the model's last turn (`messages[-1]`, an assistant message whose
    content is the turn's text; `last_token_id` the last token it sampled) so that the
    sequence continues with `new_messages` and a fresh assistant turn. `render` is the chat
    template's (default: the tokenizer's own)."""
    if render is None:
        def render(msgs: list[dict], generation_prompt: bool) -> str:
            return tokenizer.apply_chat_template(msgs, tokenize=False,
                                                 add_generation_prompt=generation_prompt)
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
    return tokenizer.encode(closing + full[len(rendered):], add_special_tokens=False)


def check_turns(tokenizer: Any, render: Render | None = None) -> None:
    """ValueError if the chat template cannot write the turns of a multi-turn episode: tried at
    start on a short conversation, so a template that cannot fails before any model loads."""
    asked = [{"role": "user", "content": "1 + 1?"}, {"role": "assistant", "content": "2"}]
    try:
        continuation_ids(tokenizer, asked, [{"role": "user", "content": "Sure?"}], None, render)
    except Exception as e:  # a template file is the user's code: any failure is theirs
        raise ValueError(f"it cannot write the turns of a multi-turn episode: {e}") from e
