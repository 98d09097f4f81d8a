"""The exploit canary: built-in cases earn nothing from the built-in verifiers; a verifier that
pays one stops the run before step 1, naming it; users register cases for their verifiers."""

import json
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


register_exploit_case(ExploitCase(f"{THIS}:always_pays", "anything at all", "no", "7"))
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
    tried = run_canary(scorer, {"code", "gsm8k", "last_number", "string_matcher"},
                       format_reward=True)
    assert tried == ["code", "gsm8k", "last_number", "r1_format"]
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
    from rlvr.trainer import train

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
        tried = run_canary(scorer, ["gsm8k", "string_f1"])
    assert "string_f1" not in tried
    warned = [r for r in caplog.records if r.levelname == "WARNING"]
    assert any("no cases for string_f1" in r.getMessage()
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
