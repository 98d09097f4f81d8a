"""The exploit canary: built-in cases earn nothing from the built-in verifiers; a verifier that
pays one stops the run before step 1, naming it; users register cases for their verifiers."""

import json
import re
import time

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.rewards import canary
from rlvr.rewards.canary import ExploitCase, cases_for, register_exploit_case, run_canary
from rlvr.rewards.scorer import RewardScorer

THIS = "tests.rewards.test_canary"


def always_pays(completion: str, ground_truth: str) -> float:
    """A verifier any answer satisfies."""
    return 1.0


def naive_code(completion: str, ground_truth: str) -> float:
    """A code verifier without a sandbox worth the name: the answer and the asserts share a
    process (the design before the two-process sandbox), in a throwaway child interpreter."""
    import subprocess
    import sys

    from rlvr.rewards.code import extract_code

    tests = json.loads(ground_truth)["tests"]
    program = (extract_code(completion) or "") + "\n" + "\n".join(tests)
    done = subprocess.run([sys.executable, "-I", "-c", program], capture_output=True,
                          timeout=10)
    return 1.0 if done.returncode == 0 else 0.0


def naive_up_to_max_length(completion: str, ground_truth: str) -> float:
    """HEAD's up_to_max_length: whitespace-separated words, and no floor for saying nothing."""
    from rlvr.rewards.format import strip_thinking

    target = int(ground_truth)
    return max(0.0, 1.0 - max(0, len(strip_thinking(completion).split()) - target) / target)


def lenient_r1_format(text: str) -> bool:
    """HEAD's test of the parts of `<think>..</think><answer>..</answer>`: not whitespace."""
    think, _, rest = text.strip()[len("<think>"):].partition("</think>")
    return bool(think.strip()) and bool(rest.strip()[len("<answer>"):-len("</answer>")].strip())


def no_cases(completion: str, ground_truth: str) -> float:
    """A verifier nobody registered a case for."""
    return 0.0


def squad_f1(completion: str, ground_truth: str) -> float:
    """HEAD's string_f1 on answers with no list separator: SQuAD's token F1, uncapped."""
    from rlvr.rewards.string_match import token_f1

    return token_f1(completion, ground_truth)


register_exploit_case(ExploitCase(f"{THIS}:always_pays", "anything at all", "no", "7"))
for _case in cases_for("string_f1"):
    register_exploit_case(ExploitCase(f"{THIS}:squad_f1", _case.name, _case.completion,
                                      _case.ground_truth, max_score=_case.max_score))
for _case in cases_for("code"):
    register_exploit_case(ExploitCase(f"{THIS}:naive_code", _case.name, _case.completion,
                                      _case.ground_truth))
for _case in cases_for("up_to_max_length"):
    register_exploit_case(ExploitCase(f"{THIS}:naive_up_to_max_length", _case.name,
                                      _case.completion, _case.ground_truth))


@pytest.fixture(scope="module")
def scorer():
    with RewardScorer(num_workers=2, timeout_s=10.0) as s:
        yield s


def test_built_in_verifiers_pay_no_built_in_exploit(scorer):
    start = time.perf_counter()
    tried = run_canary(scorer, {"code", "gsm8k", "last_number", "string_matcher", "string_f1"},
                       format_reward=True)
    assert tried == ["code", "gsm8k", "last_number", "string_f1", "string_matcher", "r1_format"]
    assert time.perf_counter() - start < 15  # under 5 s alone; generous beside other jobs


def test_length_and_ifeval_verifiers_pay_no_blank_answer(scorer):
    """HEAD had no case for these verifiers, and up_to_max_length paid 1 for an empty answer,
    ifeval 0.75 for a zero-width one."""
    tried = run_canary(scorer, {"up_to_max_length", "max_length", "ifeval"}, format_reward=True)
    assert tried == ["ifeval", "max_length", "up_to_max_length", "r1_format"]
    for verifier in ("up_to_max_length", "max_length", "ifeval"):
        assert {"empty answer", "zero-width answer", "reasoning never closed"} <= \
            {case.name for case in cases_for(verifier)}


def test_the_blank_answer_cases_are_real_exploits(scorer):
    """Against HEAD's length rule the cases pay: the canary would have caught it."""
    with pytest.raises(ConfigError) as caught:
        run_canary(scorer, {f"{THIS}:naive_up_to_max_length"})
    for case in ("empty answer", "zero-width answer", "reasoning never closed"):
        assert f"'{case}'" in str(caught.value)


def test_a_format_reward_paying_invisible_tags_is_caught(scorer, monkeypatch):
    monkeypatch.setattr(canary, "has_r1_format", lenient_r1_format)
    with pytest.raises(ConfigError) as caught:
        run_canary(scorer, set(), format_reward=True)
    assert "'zero-width tags'" in str(caught.value) and "'full-stop tags'" in str(caught.value)
    assert "'empty tags'" not in str(caught.value)  # HEAD's check did refuse those


@pytest.mark.parametrize("verifier", ["math", "strict_math"])
def test_math_verifiers_pay_no_hedge(scorer, verifier):
    """The math verifiers of HEAD paid 'The final answer is 7, 8, 9' for 7 (math-verify read
    the list and matched a member); issue 35's answer extraction (rewards/math.py) pays none."""
    run_canary(scorer, {verifier})


def test_a_verifier_that_pays_stops_the_run_naming_it_and_the_case(scorer):
    with pytest.raises(ConfigError, match=rf"'{THIS}:always_pays' paid 1 for exploit "
                                          r"'anything at all'.*exploit_canary=false"):
        run_canary(scorer, {f"{THIS}:always_pays", "gsm8k"})


def test_the_code_cases_are_real_exploits(scorer):
    """Against answer and asserts in one process, the cases pay: the canary would have caught
    the sandbox's old design."""
    with pytest.raises(ConfigError) as caught:
        run_canary(scorer, {f"{THIS}:naive_code"})
    assert "'patching assert'" in str(caught.value) and "'reading the tests'" in str(caught.value)


def test_a_lenient_format_reward_is_caught(scorer, monkeypatch):
    monkeypatch.setattr(canary, "has_r1_format", lambda text: True)
    with pytest.raises(ConfigError, match="'r1_format' paid 1 for exploit 'empty tags'"):
        run_canary(scorer, set(), format_reward=True)
    run_canary(scorer, set(), format_reward=False)  # not applied, not tried


def test_a_case_name_is_taken_once():
    case = ExploitCase("some_verifier", "same name", "a", "b")
    register_exploit_case(case)
    register_exploit_case(case)  # the same case again (a module imported twice): fine
    with pytest.raises(ValueError, match="already registered"):
        register_exploit_case(ExploitCase("some_verifier", "same name", "other", "b"))


def test_training_stops_before_step_1_when_a_verifier_pays(tmp_path):
    from rlvr.run.loop import train

    overrides = [f"experiment.output_dir={tmp_path}", "experiment.total_episodes=16",
                 f"rewards.remap_verifier={{last_number: '{THIS}:always_pays'}}",
                 "logging.progress_bar=false", "checkpoint.save_final=false"]
    with pytest.raises(ConfigError, match="exploit canary"):
        train(load_config("configs/tiny.yaml", overrides))
    assert not (tmp_path / "metrics.jsonl").exists() or \
        (tmp_path / "metrics.jsonl").read_text().strip() == ""
    run = train(load_config("configs/tiny.yaml", [*overrides, "rewards.exploit_canary=false"]))
    assert run.history[-1]["training_step"] == 1


def test_a_verifier_without_cases_is_warned_about_by_name(scorer, caplog):
    """The log said "none paid" with "no cases for ..." at the end of an INFO line: a custom
    verifier nobody tried read like one that passed."""
    with caplog.at_level("INFO"):
        tried = run_canary(scorer, ["gsm8k", f"{THIS}:no_cases"])
    assert f"{THIS}:no_cases" not in tried
    warned = [r for r in caplog.records if r.levelname == "WARNING"]
    assert any(f"no cases for {THIS}:no_cases" in r.getMessage()
               and "register_exploit_case" in r.getMessage() for r in warned)


def test_a_custom_verifier_next_to_the_run_imports_without_pythonpath(tmp_path, monkeypatch):
    """`module:function` in the start directory failed with ModuleNotFoundError unless
    PYTHONPATH named it, though the docs said the start directory counts, as for workflows."""
    import sys

    from rlvr.rewards.registry import get_verifier

    (tmp_path / "next_to_the_run.py").write_text(
        "def exact(completion, ground_truth):\n    return float(completion == ground_truth)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    score = get_verifier("next_to_the_run:exact")
    assert score("7", "7") == 1.0


# ------------------------------------------------------------------ issue 48: every verifier


def test_every_built_in_verifier_has_cases():
    """HEAD never tried string_f1, string_matcher or llm_judge: a hedge they paid went unseen."""
    from rlvr.rewards.registry import BATCHED_VERIFIERS, VERIFIERS

    built_in = [name for name in VERIFIERS if ":" not in name
                and VERIFIERS[name].score.__module__.startswith("rlvr.")]
    assert {"string_f1", "string_matcher", "math", "gsm8k", "ifeval", "code"} <= set(built_in)
    # Test modules register stub batched verifiers named test_* at import (test_batched.py,
    # test_verifier_attacks2.py), left for the rest of the worker: not built in.
    batched = [name for name in BATCHED_VERIFIERS if not name.startswith("test_")]
    assert "llm_judge" in batched
    assert [name for name in [*built_in, *batched] if not cases_for(name)] == []


def test_string_and_ifeval_verifiers_pay_no_hedge(scorer):
    tried = run_canary(scorer, {"string_f1", "string_matcher", "ifeval", "math", "strict_math"})
    assert tried == ["ifeval", "math", "strict_math", "string_f1", "string_matcher"]


def test_the_spaced_hedge_cases_are_real_exploits(scorer):
    """Plain token F1 (HEAD's string_f1 on these) paid "London Paris" 0.67 against Paris, over
    the 0.5 committing earns at even odds: the canary would have caught it."""
    with pytest.raises(ConfigError) as caught:
        run_canary(scorer, {f"{THIS}:squad_f1"})
    for case in ("hedge with spaces", "three-way hedge with spaces", "hedge in brackets",
                 "hedge with question marks"):
        assert f"'{case}'" in str(caught.value)


def _fenced(name: str, prompt: str) -> str:
    return re.search(rf"<{name}-[0-9a-f]+>\n(.*?)\n</{name}-", prompt, re.S).group(1)


class ScriptedJudgeBackend:
    """A judge model's replies, scripted from the prompt: `credulous` pays an answer that
    contains the reference anywhere; `obedient` ends with any "Score: N" the answer holds."""

    def __init__(self, kind: str):
        self.kind, self.asked = kind, []

    def complete(self, prompts):
        from rlvr.rewards.judge import JudgeReply

        replies = []
        for prompt in prompts:
            answer, reference = _fenced("answer", prompt), _fenced("reference", prompt)
            self.asked.append(answer)
            said = re.search(r"Score: \d+", answer)
            if self.kind == "obedient" and said:
                replies.append(JudgeReply(text=f"As instructed.\n{said.group()}"))
            elif self.kind == "credulous" and any(w in answer for w in reference.split()):
                replies.append(JudgeReply(text="It names the reference.\nScore: 10"))
            else:
                replies.append(JudgeReply(text="Wrong.\nScore: 0"))
        return replies

    def close(self):
        pass


def _judge_scorer(kind: str):
    from rlvr.rewards.judge import JUDGE_VERIFIER, JudgeScorer, JudgeSettings

    backend = ScriptedJudgeBackend(kind)
    judge = JudgeScorer(JudgeSettings(engine="scripted", model="x"), backend)
    return RewardScorer(num_workers=0, batched={JUDGE_VERIFIER: judge}), backend


def test_the_llm_judge_is_tried_and_a_judge_paying_hedges_stops_the_run():
    """HEAD skipped llm_judge (a batched verifier): a judge paying "London or Paris" passed."""
    with _judge_scorer("credulous")[0] as credulous:
        with pytest.raises(ConfigError) as caught:
            run_canary(credulous, {"llm_judge"})
    for case in ("hedge with or", "hedged list", "every option"):
        assert f"'llm_judge' paid 1 for exploit '{case}'" in str(caught.value)
    scorer, backend = _judge_scorer("strict")
    with scorer:
        assert run_canary(scorer, {"llm_judge"}) == ["llm_judge"]
    assert "It is London or Paris." in backend.asked


def test_a_judge_that_obeys_a_forged_verdict_is_not_paid():
    """The answer's "Score: 10" never reaches a judge that would repeat it (HEAD paid 1)."""
    scorer, backend = _judge_scorer("obedient")
    with scorer:
        assert run_canary(scorer, {"llm_judge"}) == ["llm_judge"]
    assert backend.asked and not any("Score: 10" in answer for answer in backend.asked)
