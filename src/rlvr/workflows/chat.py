"""The tokens between two turns of an episode, in the tokenizer's chat template.

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

from typing import Any

_MARK = "\u2063rlvr-turn\u2063"  # stands in for the assistant's text when locating its end


def continuation_ids(tokenizer: Any, messages: list[dict], new_messages: list[dict],
                     last_token_id: int | None) -> list[int]:
    """Ids to append after the model's last turn (`messages[-1]`, an assistant message whose
    content is the turn's text; `last_token_id` the last token it sampled) so that the
    sequence continues with `new_messages` and a fresh assistant turn."""
    if not messages or messages[-1].get("role") != "assistant":
        raise ValueError("the conversation must end with the assistant turn just sampled")
    marked = [*messages[:-1], {"role": "assistant", "content": _MARK}]
    rendered = _render(tokenizer, marked, generation_prompt=False)
    at = rendered.rfind(_MARK)
    if at < 0:
        raise ValueError("the chat template drops the assistant's text; multi-turn episodes "
                         "need a template that renders it")
    closing = rendered[at + len(_MARK):]  # how the template ends an assistant turn
    full = _render(tokenizer, [*marked, *new_messages], generation_prompt=True)
    if not full.startswith(rendered):
        raise ValueError("the chat template renders earlier turns differently once more "
                         "messages follow; multi-turn episodes need a template that does not")
    tail = tokenizer.decode([last_token_id]) if last_token_id is not None else ""
    if tail and closing.startswith(tail):  # the model closed its turn itself
        closing = closing[len(tail):]
    return tokenizer.encode(closing + full[len(rendered):], add_special_tokens=False)


def _render(tokenizer: Any, messages: list[dict], generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False,
                                         add_generation_prompt=generation_prompt)
