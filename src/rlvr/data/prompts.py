"""Examples to `Prompt`s: the run's chat template (`rlvr.data.templates`), a length limit, a
drop count. Every row is rendered here, before any model loads, so a template that cannot
render a row, or renders it empty, fails naming the row's source, row and the reason."""

from __future__ import annotations

from rlvr.data.errors import DataError, Example
from rlvr.data.templates import ChatTemplate
from rlvr.types import Prompt


def _row(example: Example) -> int | None:
    index = example.id.rpartition("/")[2]  # ids are "<source>/<row index>"
    return int(index) if index.isdigit() else None


def render_row(template: ChatTemplate, example: Example, messages: list[dict]) -> list[int]:
    """The token ids `template` gives `messages` (`example`'s, with any system prompt), with
    the generation prompt; DataError naming the example's source and row if the template
    cannot render them or renders nothing but whitespace."""
    try:
        text = template.render(messages, add_generation_prompt=True)
    except Exception as e:  # a template file is the user's code: any failure is theirs to fix
        raise DataError(example.source, _row(example), None,
                        f"{template.origin} cannot render it: {type(e).__name__}: {e}") from e
    if not text.strip():
        raise DataError(example.source, _row(example), None,
                        f"{template.origin} renders an empty prompt for it")
    return template.encode(text)


def tokenize_examples(examples: list[Example], template: ChatTemplate, max_prompt_length: int,
                      system_prompt: str | None) -> tuple[list[Prompt], int]:
    prompts, dropped = [], 0
    for ex in examples:
        messages = list(ex.messages)
        if system_prompt is not None and messages[0]["role"] != "system":
            messages.insert(0, {"role": "system", "content": system_prompt})
        ids = render_row(template, ex, messages)
        if len(ids) > max_prompt_length:
            dropped += 1
            continue
        prompts.append(Prompt(id=ex.id, messages=tuple(messages), token_ids=tuple(ids),
                              ground_truth=ex.ground_truth, verifiers=ex.verifiers,
                              source=ex.source, metadata_json=ex.metadata_json))
    return prompts, dropped
