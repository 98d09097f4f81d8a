"""The engine judge applies its tokenizer's chat template in the policy's sandbox
(`render_tokenizer_template`): the same ids as `apply_chat_template` for an ordinary template,
a TemplateLimitError naming the judge's template for a hostile one."""

import copy

import pytest

from rlvr.data.templates import TemplateLimitError
from rlvr.rewards.judge import EngineJudge, JudgeSettings

SETTINGS = JudgeSettings(engine="transformers", model="tiny-llama")


@pytest.mark.parametrize("model", ["tiny-llama", "smollm2-135m-instruct"])
def test_the_judge_prompt_is_what_apply_chat_template_gives(model, tiny_tokenizer):
    from rlvr.models import load_tokenizer, resolve_model_dir

    tokenizer = tiny_tokenizer if model == "tiny-llama" else load_tokenizer(
        resolve_model_dir(model))
    judge = EngineJudge(engine=None, tokenizer=tokenizer, settings=SETTINGS)
    text = "Grade this: <answer-1>\n2 + 2 = 4\n</answer-1>"
    expected = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                             add_generation_prompt=True, tokenize=True)
    expected = expected["input_ids"] if hasattr(expected, "keys") else expected
    assert judge.prompt_ids(text) == list(expected)


def test_a_hostile_judge_template_is_refused(tiny_tokenizer):
    tokenizer = copy.deepcopy(tiny_tokenizer)
    # 20 M characters: apply_chat_template writes them all; the sandbox refuses at 4 Mi
    tokenizer.chat_template = "{% set s = 'a' * 4000000 %}{{ s ~ s ~ s ~ s ~ s }}"
    judge = EngineJudge(engine=None, tokenizer=tokenizer, settings=SETTINGS)
    with pytest.raises(TemplateLimitError, match="the judge tokenizer's chat template"):
        judge.prompt_ids("Score this")


def test_a_judge_whose_template_cannot_render_stops_before_its_engine_loads(
        tiny_tokenizer, monkeypatch):
    """Checked at load, a ConfigError (exit 2 at start), not a failure of every judgement."""
    import rlvr.models
    import rlvr.rollout

    tokenizer = copy.deepcopy(tiny_tokenizer)
    tokenizer.chat_template = "{% set s = 'a' * 4000000 %}{{ s ~ s ~ s ~ s ~ s }}"
    with monkeypatch.context() as patch:
        patch.setattr(rlvr.models, "resolve_model_dir", lambda name: name)
        patch.setattr(rlvr.models, "load_tokenizer", lambda model_dir: tokenizer)
        patch.setattr(rlvr.rollout, "create_engine",
                      lambda *a, **k: pytest.fail("the engine loaded before the check"))
        with pytest.raises(TemplateLimitError, match="the judge tokenizer's chat template"):
            EngineJudge.load(SETTINGS)


def test_an_answer_the_judge_template_refuses_is_that_judgements_error(tiny_tokenizer):
    """The rubric holds the policy's answer: a template that refuses one (here by
    `raise_exception`) fails that judgement, and the batch's others are judged."""
    from rlvr.types import Completion

    class Engine:
        def generate(self, prompts, params):
            self.prompts = prompts
            return [[Completion([1], [0.0], "stop", "Score: 7")] for _ in prompts]

    tokenizer = copy.deepcopy(tiny_tokenizer)
    tokenizer.chat_template = ("{% if 'FORBIDDEN' in messages[0].content %}"
                               "{{ raise_exception('no') }}{% endif %}"
                               "{{ messages[0].content }}")
    engine = Engine()
    replies = EngineJudge(engine, tokenizer, SETTINGS).complete(["one", "a FORBIDDEN one",
                                                                 "three"])
    assert [r.text for r in replies] == ["Score: 7", None, "Score: 7"]
    assert replies[1].error.startswith("judge prompt failed") and len(engine.prompts) == 2
