"""The text between turns renders the tokenizer's own template in the sandbox prompts use
(`render_tokenizer_template`), not through an unbounded `apply_chat_template`."""

import copy

import pytest

from rlvr.data.templates import TemplateLimitError, render_tokenizer_template
from rlvr.workflows.chat import continuation_ids

TURNS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1 + 1?"},
         {"role": "assistant", "content": "2"}, {"role": "tool", "content": "ok"}]


@pytest.mark.parametrize("model", ["tiny-llama", "smollm2-135m-instruct"])
@pytest.mark.parametrize("generation_prompt", [True, False])
def test_the_bounded_render_is_apply_chat_template_s_text(model, generation_prompt,
                                                         tiny_tokenizer):
    from rlvr.models import load_tokenizer, resolve_model_dir

    tokenizer = tiny_tokenizer if model == "tiny-llama" else load_tokenizer(
        resolve_model_dir(model))
    for n in range(1, len(TURNS) + 1):
        assert render_tokenizer_template(tokenizer, TURNS[:n], generation_prompt) == (
            tokenizer.apply_chat_template(TURNS[:n], tokenize=False,
                                          add_generation_prompt=generation_prompt))


def test_continuation_ids_render_a_hostile_tokenizer_template_bounded(tiny_tokenizer):
    tokenizer = copy.deepcopy(tiny_tokenizer)
    # 20 M characters before the turns: apply_chat_template writes them all
    tokenizer.chat_template = ("{% set s = 'a' * 4000000 %}{{ s ~ s ~ s ~ s ~ s }}"
                               "{% for m in messages %}{{ m.content }}{% endfor %}")
    with pytest.raises(TemplateLimitError, match="the tokenizer's chat template"):
        continuation_ids(tokenizer, TURNS[1:3], [{"role": "user", "content": "more"}], None)
