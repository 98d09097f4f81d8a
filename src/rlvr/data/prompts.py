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


# The roles a prompt's messages may have: what chat templates write turns for. Another string
# goes into the template's turn header as it is, where a template would print it whole.
ROLES = ("system", "user", "assistant", "tool")


def control_strings(tokenizer: object) -> tuple[str, ...]:
    """The tokenizer's special tokens as text (`<|im_start|>`, `<|endoftext|>`, ...): a prompt
    holding one is encoded with it as the control token, so a row could close its turn and
    write an assistant's (or a system's) turn of its own."""
    found = set(getattr(tokenizer, "all_special_tokens", None) or ())
    for token in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        if getattr(token, "special", False):
            found.add(str(getattr(token, "content", token)))
    return tuple(sorted(t for t in found if t.strip()))


def check_messages(example: Example, messages: list[dict], controls: tuple[str, ...]) -> None:
    """DataError naming `example`'s source and row if a message's role is not one of `ROLES`,
    or its role or content holds a control token's text: the row would write turns of its own
    (a forged assistant turn trained on as the prompt's)."""
    for k, m in enumerate(messages):
        if m["role"] not in ROLES:
            raise DataError(example.source, _row(example), None,
                            f"message {k} has the role {m['role'][:40]!r}; a prompt's roles "
                            f"are {', '.join(ROLES)}")
        held = next((t for t in controls if t in m["content"]), None)
        if held is not None:
            raise DataError(example.source, _row(example), None,
                            f"message {k} holds the tokenizer's control token {held!r}: its "
                            "text would be read as that token and could write turns of its "
                            "own; remove it from the data")


def tokenize_examples(examples: list[Example], template: ChatTemplate, max_prompt_length: int,
                      system_prompt: str | None) -> tuple[list[Prompt], int]:
    prompts, dropped = [], 0
    controls = control_strings(getattr(template, "tokenizer", None))
    for ex in examples:
        messages = list(ex.messages)
        check_messages(ex, messages, controls)
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
