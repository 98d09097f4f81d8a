"""Prompt templates: how a conversation becomes the text, and the token ids, a model is given.

`data.chat_template` picks one:
- `tokenizer` (the default): the tokenizer's own chat template, as transformers applies it;
- a built-in name (`CHAT_TEMPLATES`): `r1_zero`, DeepSeek-R1-Zero's plain-text prompt
  ("A conversation between User and Assistant ... User: ... Assistant:") for RL from a base
  model, which stops at `</answer>`; `plain`, the one user message's text as is;
- a path to a Jinja file, written like a Hugging Face chat template (it sees `messages`,
  `add_generation_prompt`, `bos_token`, `eos_token` and `raise_exception`).

A template decides everything about its format: the generation prompt (rendered when
`add_generation_prompt` is true, so `plain` has none), whether it renders several turns (for
multi-turn workflows), and the stop strings its format implies, which the run merges into
`rollout.stop_strings`. Jinja templates are rendered with jinja2 in a sandbox with the settings
transformers uses for chat templates, so a template file behaves here as it would there.
A template is the user's (or a downloaded model's) code, run on every row before the model
loads, so every one, the tokenizer's included (the policy's and the LLM judge's, through
`render_tokenizer_template`), renders in `template_sandbox.BoundedEnvironment`: values, output,
what one render builds and its time are bounded, and a result that is a product of two values
(`s.replace('a', s)`, `x|join(s)`, a format's widths) is sized before it is built; a template
over a limit is a ConfigError naming it.
A rendered text is tokenized the way the tokenizer starts a document: its BOS token first if it
adds one to plain text (Llama's `<s>`; SmolLM2 adds none), unless the text already begins with
it, then the text without further special tokens.

Not here: reading rows (`readers`), checking every row renders (`prompts.tokenize_examples`),
the text between the turns of an episode (`rlvr.workflows.chat`, given a template's `render`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

import jinja2
import jinja2.ext

from rlvr.config import ConfigError
from rlvr.data.template_sandbox import (MAX_VALUE_CHARS, BoundedEnvironment, TemplateLimitError,
                                       strftime_now)
from rlvr.registry import Registry

TOKENIZER = "tokenizer"  # the data.chat_template value for the tokenizer's own template


class ChatTemplate(Protocol):
    """A prompt format bound to a tokenizer."""

    name: str  # the data.chat_template value it came from
    origin: str  # where its text is, for messages: "the tokenizer's", "built-in r1_zero", a path
    stop_strings: tuple[str, ...]  # generation ends at any of them (the format's end)

    def render(self, messages: list[dict], add_generation_prompt: bool) -> str: ...

    def encode(self, text: str) -> list[int]:
        """Token ids of a text this template rendered."""
        ...


def prompt_ids(template: ChatTemplate, messages: list[dict]) -> list[int]:
    """What the engine is sent for `messages`: rendered with the generation prompt, encoded."""
    return template.encode(template.render(messages, add_generation_prompt=True))


@dataclass(frozen=True)
class BuiltinTemplate:
    """A registered template: its Jinja text and what its format implies."""

    jinja: str
    stop_strings: tuple[str, ...] = ()
    turns: bool = True  # renders conversations of several turns (multi-turn workflows)


CHAT_TEMPLATES: Registry[BuiltinTemplate] = Registry("data.chat_template")

# The prompt of DeepSeek-R1-Zero (DeepSeek-AI 2025, table 1). A system message, if a row or
# `data.system_prompt` gives one, takes the place of this opening.
R1_ZERO_OPENING = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant "
    "solves it. The assistant first thinks about the reasoning process in the mind and then "
    "provides the user with the answer. The reasoning process and answer are enclosed within "
    "<think> </think> and <answer> </answer> tags, respectively, i.e., <think> reasoning "
    "process here </think> <answer> answer here </answer>.")

CHAT_TEMPLATES.add("r1_zero", BuiltinTemplate(
    jinja=(
        "{%- if messages and messages[0].role == 'system' -%}"
        "{{ messages[0].content }}{%- set turns = messages[1:] -%}"
        "{%- else -%}" + R1_ZERO_OPENING + "{%- set turns = messages -%}{%- endif -%}"
        # Every turn continues the line: "User: ...", "Assistant: ...", "Tool: ...".
        "{%- for m in turns %} {{ m.role | capitalize }}: {{ m.content }}{% endfor -%}"
        # No space after the colon: the model writes " <think>", a token of its own.
        "{%- if add_generation_prompt %} Assistant:{% endif -%}"),
    stop_strings=("</answer>",)))  # the format is complete at its last tag

CHAT_TEMPLATES.add("plain", BuiltinTemplate(
    jinja=(
        "{%- if messages | length != 1 or messages[0].role != 'user' -%}"
        "{{ raise_exception('the plain template renders exactly one user message as is (no "
        "system prompt, no other turns); this conversation has the roles: ' "
        "~ (messages | map(attribute='role') | join(', '))) }}"
        "{%- endif -%}"
        "{{ messages[0].content }}"),
    turns=False))


def _raise_exception(message: str) -> None:
    raise jinja2.TemplateError(message)


def _environment(*extensions: Any) -> BoundedEnvironment:
    # The settings transformers compiles chat templates with, so a template file written for
    # a tokenizer renders the same text here.
    env = BoundedEnvironment(trim_blocks=True, lstrip_blocks=True,
                             extensions=[*extensions, "jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = _raise_exception
    return env


class _GenerationTag(jinja2.ext.Extension):
    """transformers' `{% generation %}...{% endgeneration %}` (it marks the assistant's
    tokens); rendered here as its body, as apply_chat_template renders it without a mask."""

    tags = {"generation"}

    def parse(self, parser: Any) -> Any:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body
                                      ).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return caller()


def _tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    # transformers' chat-template `tojson` (jinja2's own escapes HTML characters), written
    # piece by piece: an `indent` repeats on every line, so a long list with a wide one would
    # be refused only once it was all written
    encoder = json.JSONEncoder(ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                               sort_keys=sort_keys)
    parts, size = [], 0
    for part in encoder.iterencode(x):
        size += len(part)
        if size > MAX_VALUE_CHARS:
            raise TemplateLimitError(f"the template would write over {MAX_VALUE_CHARS:,} "
                                     "characters of JSON")
        parts.append(part)
    return "".join(parts)


@lru_cache(maxsize=8)
def _tokenizer_environment_template(text: str) -> jinja2.Template:
    """A tokenizer's template text compiled in a `BoundedEnvironment` holding what
    transformers' chat-template environment holds (`tojson`, `strftime_now`,
    `{% generation %}`), so it renders what `apply_chat_template` would. Never compiled by
    transformers: its compiler folds constants such as `'x' * 4000000000`."""
    env = _environment(_GenerationTag)
    env.filters["tojson"] = env._bounded_call(_tojson, "tojson")
    env.globals["strftime_now"] = strftime_now  # bounded before strftime runs
    return env.from_string(text)


def render_tokenizer_template(tokenizer: Any, messages: list[dict], add_generation_prompt: bool,
                              origin: str = "the tokenizer's chat template") -> str:
    """What `tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=...)`
    renders, in a `BoundedEnvironment`: the one way rlvr applies a tokenizer's template (the
    policy's, the judge's). A limit it passes is a TemplateLimitError naming `origin`."""
    template = _tokenizer_environment_template(tokenizer.get_chat_template())
    return _bounded_render(template, origin, messages=messages, tools=None, documents=None,
                           add_generation_prompt=add_generation_prompt,
                           **tokenizer.special_tokens_map)


@dataclass(frozen=True)
class TokenizerTemplate:
    """The tokenizer's own chat template, rendered as `apply_chat_template` renders it (in the
    sandbox: `render_tokenizer_template`) and encoded as `apply_chat_template(tokenize=True)`
    encodes it (prompts get the ids they had before templates were a choice)."""

    tokenizer: Any
    name: str = TOKENIZER
    origin: str = "the tokenizer's chat template"
    stop_strings: tuple[str, ...] = ()

    def render(self, messages: list[dict], add_generation_prompt: bool) -> str:
        return render_tokenizer_template(self.tokenizer, messages, add_generation_prompt,
                                         self.origin)

    def encode(self, text: str) -> list[int]:
        # What apply_chat_template(tokenize=True) does: the template writes its own specials.
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])


@dataclass(frozen=True)
class JinjaTemplate:
    """A built-in or file template: Jinja text rendered here, tokenized as a document."""

    name: str
    origin: str
    template: jinja2.Template
    tokenizer: Any
    stop_strings: tuple[str, ...] = ()

    def render(self, messages: list[dict], add_generation_prompt: bool) -> str:
        field = "" if self.name in CHAT_TEMPLATES else "data.chat_template="
        return _bounded_render(self.template, f"{field}{self.origin}", messages=messages,
                               add_generation_prompt=add_generation_prompt,
                               bos_token=self.tokenizer.bos_token or "",
                               eos_token=self.tokenizer.eos_token or "")

    def encode(self, text: str) -> list[int]:
        bos = self.tokenizer.bos_token
        start = [] if bos and text.startswith(bos) else document_start_ids(self.tokenizer)
        return start + list(self.tokenizer(text, add_special_tokens=False)["input_ids"])


def _bounded_render(template: jinja2.Template, origin: str, **variables: Any) -> str:
    """`template` rendered in its `BoundedEnvironment`; a limit it passes is a ConfigError
    naming `origin` (the tokenizer's template, or data.chat_template=FILE)."""
    try:
        return template.environment.render(template, **variables)
    except TemplateLimitError as e:
        raise TemplateLimitError(f"{origin}: {e}") from None
    except MemoryError:
        raise TemplateLimitError(f"{origin}: the template ran out of memory") from None


def document_start_ids(tokenizer: Any) -> list[int]:
    """The BOS id if the tokenizer puts it before plain text, else nothing."""
    bos = tokenizer.bos_token_id
    if bos is None:
        return []
    return [bos] if list(tokenizer("", add_special_tokens=True)["input_ids"])[:1] == [bos] else []


def template_stop_strings(spec: str) -> tuple[str, ...]:
    """The stop strings a `data.chat_template` value implies (a built-in's; files and the
    tokenizer's template imply none: set `rollout.stop_strings`)."""
    return CHAT_TEMPLATES[spec].stop_strings if spec in CHAT_TEMPLATES else ()


def merge_stop_strings(configured: Any, spec: str) -> tuple[str, ...]:
    """`rollout.stop_strings` first, then the template's, each once."""
    return tuple(dict.fromkeys([*configured, *template_stop_strings(spec)]))


def check_template_choice(spec: str, multi_turn: bool, field: str = "data.chat_template"
                          ) -> list[str]:
    """Problems with a `data.chat_template` value that need no tokenizer: a name that is
    neither `tokenizer`, a built-in nor an existing file, or a built-in that cannot render the
    turns a multi-turn workflow (`multi_turn`) needs."""
    if spec == TOKENIZER:
        return []
    if spec in CHAT_TEMPLATES:
        if multi_turn and not CHAT_TEMPLATES[spec].turns:
            others = sorted({TOKENIZER, *CHAT_TEMPLATES} - {spec})
            return [f"{field}={spec!r} renders a single user message and cannot express the "
                    f"turns of a multi-turn workflow: use one of {others} or a Jinja file"]
        return []
    if not Path(spec).is_file():
        return [f"{field}={spec!r} is neither {TOKENIZER!r}, a built-in template "
                f"{sorted(CHAT_TEMPLATES)}, nor an existing Jinja file"]
    return []


def template_text(spec: str, tokenizer: Any) -> str:
    """The Jinja text of template `spec` ("" where there is none to read): what
    `rlvr.run.settings.scorer_settings` looks for the think and answer tags in."""
    if spec == TOKENIZER:
        text = getattr(tokenizer, "chat_template", None) or ""
        return text if isinstance(text, str) else " ".join(map(str, dict(text).values()))
    if spec in CHAT_TEMPLATES:
        return CHAT_TEMPLATES[spec].jinja
    try:
        return Path(spec).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def load_chat_template(spec: str, tokenizer: Any, field: str = "data.chat_template"
                       ) -> ChatTemplate:
    """The template `spec` names, bound to `tokenizer`. ConfigError naming `field` for an
    unknown name, a missing or unreadable file, a Jinja syntax error (file and line), or
    `tokenizer` for a tokenizer that has no chat template."""
    problems = check_template_choice(spec, multi_turn=False, field=field)
    if problems:
        raise ConfigError(problems[0])
    if spec == TOKENIZER:
        if getattr(tokenizer, "chat_template", None) is None:
            raise ConfigError(
                f"{field}={TOKENIZER!r}, but the tokenizer of "
                f"{getattr(tokenizer, 'name_or_path', '') or 'this model'!s} has no chat template "
                f"(a base model): choose {field}= one of {sorted(CHAT_TEMPLATES)} or a path to a "
                "Jinja template file")
        return TokenizerTemplate(tokenizer)
    if spec in CHAT_TEMPLATES:
        entry = CHAT_TEMPLATES[spec]
        return JinjaTemplate(spec, f"built-in {spec}", _environment().from_string(entry.jinja),
                             tokenizer, entry.stop_strings)
    return JinjaTemplate(spec, spec, _compile_file(Path(spec), field), tokenizer)


def _compile_file(path: Path, field: str) -> jinja2.Template:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{field}={str(path)!r}: cannot read it: {e}") from None
    try:
        return _environment().from_string(text)
    except jinja2.TemplateSyntaxError as e:
        raise ConfigError(f"{field}={str(path)!r}: {path} line {e.lineno}: Jinja syntax "
                          f"error: {e.message}") from None
