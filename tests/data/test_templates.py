"""Prompt templates (`data.chat_template`): the exact ids each template sends the engine, stop
strings, the R1 format and answer extraction on r1_zero completions, turns, and bad input."""

import json

import pytest

from rlvr.run.input_checks import check_registered_names
from rlvr.run.settings import source_settings
from rlvr.cli import main
from rlvr.config import ConfigError, DataConfig, DataSourceConfig, load_config
from rlvr.data import build_datasets
from rlvr.data.errors import DataError, Example
from rlvr.data.prompts import tokenize_examples
from rlvr.data.templates import (R1_ZERO_OPENING, load_chat_template, merge_stop_strings,
                                 prompt_ids, template_stop_strings)
from rlvr.producer.groups import RewardShaping
from rlvr.rewards import format_reward_scores, get_verifier, has_r1_format, strip_thinking
from rlvr.rewards.scorer import RewardScorer
from rlvr.types import Completion, Prompt, SamplingParams
from rlvr.workflows import EpisodeRunner, WorkflowSettings
from rlvr.workflows.chat import continuation_ids
from rlvr.workflows.multi_turn import multi_turn
from rlvr.workflows.single_turn import single_turn

QUESTION = [{"role": "user", "content": "What is 2 + 3?"}]
IM_START, IM_END = 1, 2  # the tiny tokenizer's ChatML specials


def byte_ids(text: str) -> list[int]:
    """Ids of ASCII text in the tiny tokenizer, worked out from how its vocabulary is built:
    3 specials, then the byte-level alphabet sorted, where printable ASCII (from "!" = 3) maps
    to itself and space / newline to U+0120 / U+010A, after the 188 printable bytes: 223 / 201."""
    special = {" ": 223, "\n": 201}
    return [special[c] if c in special else ord(c) - 30 for c in text]


def test_byte_ids_match_the_tiny_tokenizer(tiny_tokenizer):
    text = "What is 2 + 3?\nA: <think>"
    assert byte_ids(text) == tiny_tokenizer.encode(text, add_special_tokens=False)


# ---- the exact ids each template sends ---------------------------------------------------


def test_tokenizer_template_sends_the_chatml_ids(tiny_tokenizer):
    ids = prompt_ids(load_chat_template("tokenizer", tiny_tokenizer), QUESTION)
    assert ids == ([IM_START] + byte_ids("user\nWhat is 2 + 3?") + [IM_END] + byte_ids("\n")
                   + [IM_START] + byte_ids("assistant\n"))
    # The same ids as before templates were a choice: apply_chat_template's own.
    before = tiny_tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True,
                                                tokenize=True)
    assert ids == list(before["input_ids"] if hasattr(before, "keys") else before)


def test_plain_template_sends_the_text_as_is(tiny_tokenizer):
    template = load_chat_template("plain", tiny_tokenizer)
    assert prompt_ids(template, QUESTION) == [
        57, 74, 67, 86, 223, 75, 85, 223, 20, 223, 13, 223, 21, 33]  # "What is 2 + 3?"
    assert template.stop_strings == ()


def test_r1_zero_template_sends_the_r1_zero_prompt(tiny_tokenizer):
    template = load_chat_template("r1_zero", tiny_tokenizer)
    ids = prompt_ids(template, QUESTION)
    assert ids == byte_ids(R1_ZERO_OPENING + " User: What is 2 + 3? Assistant:")
    assert ids[-11:] == [223, 35, 85, 85, 75, 85, 86, 67, 80, 86, 28]  # " Assistant:"
    assert template.stop_strings == ("</answer>",)
    # A system message (a row's, or data.system_prompt) takes the opening's place.
    system = [{"role": "system", "content": "Be brief."}, *QUESTION]
    assert template.render(system, add_generation_prompt=True) == \
        "Be brief. User: What is 2 + 3? Assistant:"
    assert template.render(QUESTION, add_generation_prompt=False).endswith("What is 2 + 3?")


def test_a_jinja_file_template_sends_its_rendering(tiny_tokenizer, tmp_path):
    path = tmp_path / "qa.jinja"
    path.write_text("{% for m in messages %}Q: {{ m.content }}\n{% endfor %}"
                    "{% if add_generation_prompt %}A:{% endif %}\n")
    template = load_chat_template(str(path), tiny_tokenizer)
    # trim_blocks, as transformers renders chat templates: no newline after a block tag, and
    # the file's last newline dropped.
    assert prompt_ids(template, QUESTION) == byte_ids("Q: What is 2 + 3?\nA:")
    assert template.stop_strings == () and template.origin == str(path)


def test_a_tokenizer_that_adds_bos_gets_it_once(tiny_tokenizer):
    class BosTokenizer:  # a Llama-like tokenizer: BOS (id 9) before any plain text
        bos_token, bos_token_id, eos_token = "<s>", 9, "</s>"

        def __call__(self, text, add_special_tokens=True):
            ids = tiny_tokenizer(text, add_special_tokens=False)["input_ids"]
            return {"input_ids": ([9] if add_special_tokens else []) + ids}

    template = load_chat_template("plain", BosTokenizer())
    assert prompt_ids(template, QUESTION) == [9] + byte_ids("What is 2 + 3?")
    # A template that writes the BOS itself (Hugging Face style) does not get a second one.
    assert prompt_ids(template, [{"role": "user", "content": "<s>hi"}]) == byte_ids("<s>hi")


def test_prompt_rows_go_to_the_model_as_their_text_under_plain(tiny_tokenizer, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"prompt": "2 + 3 =", "ground_truth": "5",
                                "dataset": "last_number"}) + "\n")
    cfg = DataConfig(train=[DataSourceConfig(name=str(rows))], eval_holdout=0,
                     chat_template="plain")
    (_, (prompt,), _), = build_datasets(cfg, tiny_tokenizer, seed=0).train.sources
    assert list(prompt.token_ids) == byte_ids("2 + 3 =")


class RecordingEngine:
    """Answers every request with `answers[turn]`, where the turn is the number of generation
    prompts (" Assistant:") in the request; records what it was sent."""

    def __init__(self, tokenizer, answers):
        self.tok, self.answers, self.requests, self.version = tokenizer, answers, [], 0

    def generate(self, prompts, params):
        self.requests.append(([list(p) for p in prompts], params))
        out = []
        for ids in prompts:
            turn = self.tok.decode(ids).count(" Assistant:") - 1
            text = self.answers[min(turn, len(self.answers) - 1)]
            ids_T = self.tok.encode(text, add_special_tokens=False)
            out.append([Completion(ids_T, [-0.5] * len(ids_T), "stop", text)
                        for _ in range(params.n)])
        return out

    def update_weights(self, named_tensors, version):
        self.version = version

    def close(self):
        pass


def _prompt(template, messages=QUESTION, truth="5"):
    return Prompt(id="q/0", messages=tuple(messages), token_ids=tuple(prompt_ids(template,
                  messages)), ground_truth=truth, verifiers=("last_number",), source="q")


def test_the_engine_gets_r1_zero_ids_and_stop_strings_in_a_training_step(tiny_tokenizer):
    cfg = load_config("configs/tiny.yaml", ["data.chat_template=r1_zero",
                                            "rollout.stop_strings=[Question]"])
    settings = source_settings(cfg)
    assert settings.sampling.stop_strings == ("Question", "</answer>")  # merged, not replaced
    template = load_chat_template("r1_zero", tiny_tokenizer)
    engine = RecordingEngine(tiny_tokenizer, [" <think> 2 and 3 </think> <answer> 5 </answer>"])
    with RewardScorer(num_workers=0) as scorer:
        runner = EpisodeRunner(single_turn, engine, scorer, tiny_tokenizer, WorkflowSettings(),
                               chat_template=template)
        episodes, _ = runner.run([_prompt(template)], settings.sampling,
                                 RewardShaping(format_reward=True))
        runner.close()
    (sent,), params = engine.requests[0]
    assert sent == byte_ids(R1_ZERO_OPENING + " User: What is 2 + 3? Assistant:")
    assert params.stop_strings == ("Question", "</answer>")
    assert [s.reward for s in episodes.groups[0]] == [1.0] * settings.sampling.n


def test_multi_turn_writes_turns_in_the_r1_zero_template(tiny_tokenizer):
    template = load_chat_template("r1_zero", tiny_tokenizer)
    first, second = "<think>x</think> <answer>4</answer>", "<think>y</think> <answer>5</answer>"
    engine = RecordingEngine(tiny_tokenizer, [first, second])
    with RewardScorer(num_workers=0) as scorer:
        runner = EpisodeRunner(multi_turn, engine, scorer, tiny_tokenizer,
                               WorkflowSettings(max_turns=2, feedback="Wrong."),
                               chat_template=template)
        episodes, metrics = runner.run([_prompt(template)], SamplingParams(n=1, seed=1),
                                       RewardShaping())
        runner.close()
    (retry,), _ = engine.requests[1]
    assert retry == (list(_prompt(template).token_ids) + byte_ids(first)
                     + byte_ids(" User: Wrong. Assistant:"))
    assert metrics["workflow/turns_mean"] == 2.0 and episodes.outcomes[0][0].score == 1.0
    ids = continuation_ids(tiny_tokenizer, [*QUESTION, {"role": "assistant", "content": first}],
                           [{"role": "user", "content": "Wrong."}], None, template.render)
    assert ids == byte_ids(" User: Wrong. Assistant:")


# ---- stop strings ------------------------------------------------------------------------


def test_stop_strings_follow_the_template_and_merge_with_the_configured_ones(tmp_path):
    assert template_stop_strings("r1_zero") == ("</answer>",)
    assert template_stop_strings("plain") == template_stop_strings("tokenizer") == ()
    assert template_stop_strings(str(tmp_path / "any.jinja")) == ()
    assert merge_stop_strings(["</answer>", "\n\n"], "r1_zero") == ("</answer>", "\n\n")
    assert merge_stop_strings([], "tokenizer") == ()


# ---- the R1 format and answer extraction on r1_zero completions --------------------------


R1_RIGHT = " <think> 2 plus 3 makes 5, not 6 </think> <answer> 5 </answer>"
R1_WRONG = " <think> 2 plus 3 makes 5 </think> <answer> 6 </answer>"


@pytest.mark.parametrize("verifier", ["gsm8k", "last_number"])
def test_verifiers_score_the_answer_tag_of_an_r1_zero_completion(verifier):
    score = get_verifier(verifier)
    assert strip_thinking(R1_RIGHT) == "5"
    assert score(R1_RIGHT, "5") == 1.0
    assert score(R1_WRONG, "5") == 0.0  # a right number while thinking earns nothing
    assert score(" <think> 2 plus 3 is 5", "5") == 0.0  # cut off before answering
    assert score(R1_RIGHT, "Two and three.\n#### 5") == 1.0  # a GSM8K gold answer


def test_the_r1_format_reward_on_r1_zero_completions():
    assert has_r1_format(R1_RIGHT) and has_r1_format(R1_WRONG)
    # The generation stops at </answer> and the engines keep it, so the format can hold.
    assert not has_r1_format(R1_RIGHT[:-len("</answer>")])
    assert format_reward_scores([1.0, 1.0], [R1_RIGHT, " 5"], 1.0, additive=False) == [1.0, 0.0]


# ---- bad input ---------------------------------------------------------------------------


def test_tokenizer_without_a_chat_template_fails_naming_the_choices(tiny_tokenizer):
    from rlvr.models.tiny import build_tiny_tokenizer

    base = build_tiny_tokenizer()
    base.chat_template = None  # a base model's tokenizer
    with pytest.raises(ConfigError, match=r"data.chat_template='tokenizer'.*no chat template"
                                          r".*\['plain', 'r1_zero'\].*Jinja"):
        build_datasets(DataConfig(), base, seed=0)
    assert load_chat_template("r1_zero", base).render(QUESTION, True).endswith("Assistant:")


def test_a_template_file_that_does_not_parse_names_the_file_and_line(tiny_tokenizer, tmp_path):
    path = tmp_path / "broken.jinja"
    path.write_text("{% for m in messages %}\n{{ m.content }\n{% endfor %}\n")
    with pytest.raises(ConfigError, match=rf"{path} line 2: Jinja syntax error"):
        load_chat_template(str(path), tiny_tokenizer)


def test_an_empty_render_names_the_source_file_and_row(tiny_tokenizer, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"prompt": p, "ground_truth": "1",
                                        "dataset": "last_number"}) + "\n"
                            for p in ["1 + 0?", "skip", "0 + 1?"]))
    path = tmp_path / "skips.jinja"
    path.write_text("{% if messages[0].content != 'skip' %}{{ messages[0].content }}{% endif %}")
    cfg = DataConfig(train=[DataSourceConfig(name=str(rows))], chat_template=str(path))
    with pytest.raises(DataError, match=rf"{rows} line 2: {path} renders an empty prompt"):
        build_datasets(cfg, tiny_tokenizer, seed=0)


def test_a_row_the_template_cannot_render_names_the_row_and_the_reason(tiny_tokenizer):
    examples = [Example(id=f"t/{i}", messages=({"role": "user", "content": "hi"},),
                        ground_truth="1", verifiers=("gsm8k",), source="t") for i in range(2)]
    template = load_chat_template("plain", tiny_tokenizer)
    with pytest.raises(DataError, match=r"^t row 1 \(counted from 1\): built-in plain cannot "
                                        r"render it: TemplateError: .*roles: system, user"):
        tokenize_examples(examples, template, 100, system_prompt="Be brief.")


def test_bad_choices_fail_at_config_time(tmp_path):
    def check(*overrides):
        check_registered_names(load_config("configs/tiny.yaml", list(overrides)))

    check("data.chat_template=r1_zero")
    with pytest.raises(ConfigError, match="'nope.jinja' is neither 'tokenizer', a built-in "
                                          r"template \['plain', 'r1_zero'\], nor an existing"):
        check("data.chat_template=nope.jinja")
    with pytest.raises(ConfigError, match="'plain' renders a single user message and cannot "
                                          "express the turns of a multi-turn workflow"):
        check("data.chat_template=plain", "rollout.workflow=multi_turn")


def test_a_file_template_without_turns_fails_before_the_model_loads(tmp_path, monkeypatch,
                                                                    capsys):
    path = tmp_path / "last.jinja"
    path.write_text("{{ messages[-1].content }}")  # drops every earlier turn
    monkeypatch.setattr("rlvr.run.build.load_causal_lm", _no_model)
    code = main(["train", "configs/tiny.yaml", f"experiment.output_dir={tmp_path / 'run'}",
                 f"data.chat_template={path}", "rollout.workflow=multi_turn",
                 "rollout.max_turns=2", "algorithm.pack_length=512"])
    assert code == 2
    assert f"data.chat_template='{path}' with rollout.workflow='multi_turn'" \
        in capsys.readouterr().err


def test_a_bad_template_fails_the_cli_before_the_model_loads(tmp_path, monkeypatch, capsys):
    path = tmp_path / "empty.jinja"
    path.write_text("{# nothing #}")
    monkeypatch.setattr("rlvr.run.build.load_causal_lm", _no_model)
    code = main(["train", "configs/tiny.yaml", f"experiment.output_dir={tmp_path / 'run'}",
                 f"data.chat_template={path}"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"addition row 1 (counted from 1): {path} renders an empty prompt" in err


def _no_model(*args, **kwargs):
    raise AssertionError("the model loaded before the template was checked")


def test_generate_takes_a_chat_template(tiny_model_dir, capsys):
    assert main(["generate", tiny_model_dir, "--prompt", "1+1?", "--max-tokens", "3",
                 "--chat-template", "r1_zero"]) == 0
    assert capsys.readouterr().out.startswith("[")
    assert main(["generate", tiny_model_dir, "--prompt", "1+1?", "--chat-template",
                 "nope"]) == 2
    assert "--chat-template='nope' is neither" in capsys.readouterr().err


# ---- end to end --------------------------------------------------------------------------


def test_tiny_trains_with_the_r1_zero_template(tmp_path):
    from rlvr.run.loop import train

    # The r1_zero opening is ~420 byte tokens on the tiny tokenizer: room for it.
    cfg = load_config("configs/tiny.yaml", [
        f"experiment.output_dir={tmp_path}", "experiment.total_episodes=32",
        "data.chat_template=r1_zero", "data.max_prompt_length=480", "algorithm.pack_length=512",
        "rewards.apply_r1_style_format_reward=true", "algorithm.filter_zero_std_samples=false",
        "eval.local_eval_every=2", "logging.progress_bar=false", "checkpoint.save_final=false"])
    run = train(cfg)
    assert [r["training_step"] for r in run.history][-1] == 2
    assert all("val/format_rate" in r for r in run.history[1:])
    assert run.data.num_dropped_too_long == 0
    saved = (tmp_path / "config.yaml").read_text()
    assert "chat_template: r1_zero" in saved


HOSTILE_TEMPLATES = {
    "big_string": "{% set s = 'x' * 4000000000 %}{{ messages[0].content }}",
    "nested_loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
                    "{% endfor %}{{ messages[0].content }}",
    "doubling": "{% set s = namespace(v='x') %}{% for i in range(40) %}"
                "{% set s.v = s.v ~ s.v %}{% endfor %}{{ messages[0].content }}",
    "padding": "{{ messages[0].content | center(4000000000) }}",
    "power": "{{ 10 ** 100000000 }}",
}


@pytest.mark.parametrize("name", sorted(HOSTILE_TEMPLATES))
def test_an_unbounded_file_template_stops_with_a_config_error(tiny_tokenizer, tmp_path, name):
    import time
    path = tmp_path / f"{name}.jinja"
    path.write_text(HOSTILE_TEMPLATES[name])
    template = load_chat_template(str(path), tiny_tokenizer)
    start = time.monotonic()
    with pytest.raises(ConfigError, match=rf"data.chat_template={path}: the template "):
        template.render([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    assert time.monotonic() - start < 10


@pytest.mark.parametrize("name", ["big_string", "nested_loops"])
def test_an_unbounded_tokenizer_template_stops_with_a_config_error(tiny_tokenizer, name):
    import copy
    import time
    tokenizer = copy.deepcopy(tiny_tokenizer)
    tokenizer.chat_template = HOSTILE_TEMPLATES[name]
    template = load_chat_template("tokenizer", tokenizer)
    start = time.monotonic()
    with pytest.raises(ConfigError, match="the tokenizer's chat template: the template "):
        template.render([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    assert time.monotonic() - start < 10
