"""Examples to `Prompt`s: the tokenizer's own chat template, a length limit, a drop count."""

from __future__ import annotations

from rlvr.data.errors import Example
from rlvr.types import Prompt


def _token_ids(tokenizer, messages: list[dict]) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    # transformers 5 returns a BatchEncoding here; older versions a plain list.
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def tokenize_examples(examples: list[Example], tokenizer, max_prompt_length: int,
                      system_prompt: str | None) -> tuple[list[Prompt], int]:
    prompts, dropped = [], 0
    for ex in examples:
        messages = list(ex.messages)
        if system_prompt is not None and messages[0]["role"] != "system":
            messages.insert(0, {"role": "system", "content": system_prompt})
        ids = _token_ids(tokenizer, messages)
        if len(ids) > max_prompt_length:
            dropped += 1
            continue
        prompts.append(Prompt(id=ex.id, messages=tuple(messages), token_ids=tuple(ids),
                              ground_truth=ex.ground_truth, verifiers=ex.verifiers,
                              source=ex.source))
    return prompts, dropped
