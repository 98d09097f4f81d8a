"""Evaluation plays the run's workflow: a `tool_use` run is measured with its tool, in the training
loop and by `rlvr eval` alike, and eval reports the workflow's own counts.

The engine is scripted so that only the tool can earn the marks: its first turn calls the Python
tool with code whose last number is not the product, and a later turn answers with the tool's
output, read from the conversation it is shown. An eval without the tool (single-turn, as eval
was) scores the tool call itself: no marks."""

from __future__ import annotations

import json
import re

import pytest

from rlvr.cli import main
from rlvr.data import EvalSet
from rlvr.producer.evaluation import EvalSettings, Evaluator, final_answer
from rlvr.rewards.scorer import RewardScorer
from rlvr.rollout import ENGINES, register_engine
from rlvr.types import Completion, Prompt, SamplingParams
from rlvr.workflows import WorkflowSettings
from rlvr.workflows.runner import EpisodePath

QUESTION = re.compile(r"What is (\d+) \* (\d+)\?")
TOOL_OUTPUT = re.compile(r"<\|im_start\|>tool\n(.*?)<\|im_end\|>", re.S)
UNSURE = "# unsure"  # a first turn with this gives up once it has seen the tool's output


class ToolReliantEngine:
    """Multiplies only through the tool. Sample k of a first turn calls it (sample 1 marks its
    code `UNSURE`); a turn that follows a tool output answers with that output, or, after an
    `UNSURE` call, gives up in words. Records how many turns it was asked for."""

    def __init__(self, tokenizer):
        self.tok = tokenizer
        self.end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.version = 0
        self.turns = 0

    def generate(self, prompts, params):
        out = []
        for ids in prompts:
            conversation = self.tok.decode(ids)
            self.turns += params.n
            out.append([self._completion(self._reply(conversation, k)) for k in range(params.n)])
        return out

    def _reply(self, conversation: str, k: int) -> str:
        outputs = TOOL_OUTPUT.findall(conversation)
        if outputs:
            return "I give up." if UNSURE in conversation else f"It is {outputs[-1].strip()}."
        a, b = QUESTION.search(conversation).groups()
        code = f"print({a} * {b})" + (f"  {UNSURE}" if k == 1 else "")
        return '<tool_call>{"name": "python", "arguments": {"code": "%s"}}</tool_call>' % code

    def _completion(self, text: str) -> Completion:
        ids = self.tok.encode(text, add_special_tokens=False) + [self.end]
        return Completion(ids, [-0.25] * len(ids), "stop", text, model_version=self.version)

    def update_weights(self, named_tensors, version):
        self.version = version

    def close(self):
        pass


ENGINE = "test_tool_reliant"
if ENGINE not in ENGINES:  # the test's engine, by name, for `rlvr train` and `rlvr eval`
    @register_engine(ENGINE)
    def _tool_reliant_engine(model_dir, settings, eos_token_ids, pad_token_id):
        from rlvr.models import load_tokenizer

        return ToolReliantEngine(load_tokenizer(model_dir))


def _prompt(tokenizer, a, b, i):
    messages = ({"role": "user", "content": f"What is {a} * {b}? Use Python."},)
    text = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True,
                                         tokenize=False)
    return Prompt(id=f"m/{i}", messages=messages,
                  token_ids=tuple(tokenizer.encode(text, add_special_tokens=False)),
                  ground_truth=str(a * b), verifiers=("last_number",), source="m")


def _evaluate(tokenizer, path):
    sets = [EvalSet("mul", [_prompt(tokenizer, 37, 8, 0), _prompt(tokenizer, 12, 9, 1)])]
    settings = EvalSettings(SamplingParams(n=2, temperature=1.0, max_tokens=96, seed=3),
                            pass_at_k=(1, 2), episodes=path)
    engine = ToolReliantEngine(tokenizer)
    with RewardScorer(num_workers=0) as scorer:
        return Evaluator(sets, settings, tokenizer).run(engine, scorer), engine


TOOL_USE = EpisodePath("tool_use", WorkflowSettings(max_turns=3, max_tool_calls=2,
                                                    tool_timeout_s=5.0))


def test_eval_plays_the_workflow_and_reports_its_counts(tiny_tokenizer):
    """Eval scored the first turn alone (the tool call: last number 8 for 37 * 8), so a
    tool_use run's eval said 0 where its episodes earn full marks."""
    result, engine = _evaluate(tiny_tokenizer, TOOL_USE)
    m = result.metrics
    # Sample 0 of each prompt answers the tool's product; sample 1 gives up after seeing it.
    assert m["eval/mul/pass@1"] == 0.5 and m["eval/mul/pass@2"] == 1.0
    assert m["eval/mul/mean_reward"] == 0.5 and m["eval/pass_at_1"] == 0.5
    assert m["eval/mul/tools/calls"] == 4.0  # one per episode: 2 prompts x 2 samples
    assert m["eval/mul/tools/turns_mean"] == 2.0 and m["eval/mul/tools/used_mean"] == 1.0
    assert m["eval/mul/tools/errors"] == 0.0 and m["eval/mul/workflow/errors"] == 0.0
    assert engine.turns == 8  # a first turn and a second per episode
    # The vote reads each episode's final answer: the product, or none for the one that gave
    # up (its whole text holds the tool's output, a number the model was shown, not said).
    assert result.sets[0].answers == [["296", None], ["108", None]]
    assert m["eval/mul/maj@2"] == 1.0


def test_single_turn_eval_of_the_same_model_scores_the_call_alone(tiny_tokenizer):
    result, engine = _evaluate(tiny_tokenizer, EpisodePath())
    assert result.metrics["eval/mul/pass@2"] == 0.0 and engine.turns == 4
    assert not any("tools/" in k for k in result.metrics)
    assert result.metrics["eval/mul/workflow/errors"] == 0.0


def test_the_final_answer_of_several_turns_is_the_last_model_turn(tiny_tokenizer):
    ids = tiny_tokenizer.encode("call 42 tool 7 said", add_special_tokens=False)
    mask = [1] * 7 + [0] * 8 + [1] * 4  # "call 42" | " tool 7 " | "said" (a byte a token)
    c = Completion(ids, [0.0] * len(ids), "stop", "call 42 tool 7 said", loss_mask_T=mask)
    assert len(ids) == len(mask) and final_answer(c, tiny_tokenizer) == "said"
    assert final_answer(Completion(ids, [0.0] * len(ids), "stop", "one call"),
                        tiny_tokenizer) == "one call"


RUN = ["model.name_or_path=tiny-llama", f"rollout.engine={ENGINE}", "rewards.num_workers=0",
       "data.max_prompt_length=200", "data.eval_holdout=4", "eval.max_prompts=4",
       "eval.num_samples=2",
       "eval.temperature=1.0", "eval.pass_at_k=[1,2]", "health.enabled=false",
       "logging.progress_bar=false"]


def test_a_tool_use_run_and_rlvr_eval_score_the_episodes_training_plays(tmp_path):
    """configs/tool_use.yaml on the tiny model with the tool-reliant engine: the trainer's
    episodes use the tool and earn their marks with it; the step-0 and step-1 evals, and `rlvr eval`,
    play the same episodes and pay them, with the tool counts under eval/."""
    run_dir = tmp_path / "run"
    common = ["configs/tool_use.yaml", *RUN, f"experiment.output_dir={run_dir}"]
    assert main(["train", *common, "experiment.total_episodes=16", "eval.local_eval_every=1",
                 "checkpoint.save_freq=0", "checkpoint.save_final=false"]) == 0
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    start, step = rows[0], rows[1]
    # Training's group of 4: sample 1 gives up after the tool, the others answer its output.
    assert step["objective/verifiable_reward"] == 0.75 and step["tools/calls"] == 16.0
    name = next(k.split("/")[1] for k in start if k.endswith("/pass@1"))
    for row in (start, step):
        # Sample 1 gives up after the tool (UNSURE): pass@1 is one half, pass@2 full marks.
        assert row[f"eval/{name}/pass@1"] == 0.5 and row[f"eval/{name}/pass@2"] == 1.0
        assert row[f"eval/{name}/tools/calls"] == 8.0  # 4 prompts x 2 samples, one call each
        assert row[f"eval/{name}/tools/turns_mean"] == 2.0
    assert main(["eval", "tiny-llama", *common]) == 0
    record = json.loads((run_dir / "eval" / "tiny-llama.json").read_text())
    assert record["sets"][name]["tools/calls"] == 8.0
    timing = {f"eval/{name}/workflow/sandbox_wait_s_max"}  # how long slots were busy: not a score
    assert {k: v for k, v in record["metrics"].items() if k not in timing} == pytest.approx(
        {k: start[k] for k in record["metrics"] if k not in timing})
