"""The LLM judge: rubrics render, scores parse, and every way a judgement fails (no score in the
reply, a malformed response, a judge too slow) is a counted error or timeout, never a silent 0.
Engine judges run on the tiny model (and a scripted engine for replies it cannot give); the
OpenAI-compatible judge runs against a stub server in a thread."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rlvr.run.input_checks import check_judge_configured, check_registered_names
from rlvr.run.settings import judge_settings
from rlvr.config import ConfigError, DataSourceConfig, load_config
from rlvr.data import LoadedData
from rlvr.data.errors import Example
from rlvr.rewards import RewardScorer, ScoreRequest
from rlvr.rewards.judge import (DEFAULT_RUBRIC, DEFAULT_SCORE_REGEX, JUDGE_VERIFIER,
                                EngineJudge, JudgeScorer, JudgeSettings, OpenAIJudge,
                                parse_score, render_rubric)
from rlvr.rewards.scorer import ScorerSettings
from rlvr.types import Completion

# The bound is "timeout plus slack", not exact: generous for a loaded machine or xdist workers,
# and still under the 10 s the endpoint's slow answer stalls for.
SLACK_S = 5.0


def _req(i, answer, question="What is 6 times 7?", truth="42", metadata=""):
    return ScoreRequest(f"s{i}", answer, truth, (JUDGE_VERIFIER,),
                        prompt_messages=({"role": "system", "content": "Be brief."},
                                         {"role": "user", "content": question}),
                        metadata_json=metadata)


def _scorer(judge):
    return RewardScorer(num_workers=0, batched={JUDGE_VERIFIER: judge})


# ------------------------------------------------------------------ rubric and score parsing


def test_the_rubric_gets_the_question_answer_truth_and_metadata():
    # Question, answer and reference arrive fenced in nonce tags; metadata (the row's) raw.
    text = render_rubric("Q={question} A={answer} T={ground_truth} L={metadata[level]}",
                         _req(0, "It is 42.", metadata='{"level": 3}'), nonce="n0")
    assert text == ("Q=<question-n0>\nWhat is 6 times 7?\n</question-n0> "
                    "A=<answer-n0>\nIt is 42.\n</answer-n0> "
                    "T=<reference-n0>\n42\n</reference-n0> L=3")
    default = render_rubric(DEFAULT_RUBRIC, _req(0, "It is 42."))
    assert "What is 6 times 7?" in default and "It is 42." in default and "Score: N" in default


@pytest.mark.parametrize("reply, score", [
    ("Good.\nScore: 7", 0.7),
    ("Score: 2 at first.\nOn reflection:\nScore: 9\n\n", 0.9),  # the last non-empty line counts
    ("**Score:** 8", 0.8), ("**Score: 8**", 0.8), ("Score: 8/10", 0.8), ("Score: 8.", 0.8),
    ("Score: 15", 1.0), ("Score: -3", 0.0), ("Score: 7.5", 0.75),
])
def test_the_final_line_s_score_is_read_scaled_and_clamped(reply, score):
    assert parse_score(reply, DEFAULT_SCORE_REGEX, 10.0) == pytest.approx(score)


def test_a_reply_without_a_score_is_an_error_quoting_it():
    with pytest.raises(ValueError, match="no score matching .* 'I am not sure.'"):
        parse_score("I am not sure.", DEFAULT_SCORE_REGEX, 10.0)


# ------------------------------------------------------------------ engine judges


class ScriptedJudgeEngine:
    """Answers every prompt with `reply` after `delay_s`; records the prompts."""

    def __init__(self, reply, delay_s=0.0):
        self.reply, self.delay_s, self.prompts, self.closed = reply, delay_s, [], False

    def generate(self, prompts, params):
        self.prompts.append(prompts)
        self.params = params
        time.sleep(self.delay_s)
        return [[Completion([1], [0.0], "stop", self.reply)] for _ in prompts]

    def close(self):
        self.closed = True


def _engine_settings(**kw):
    return JudgeSettings(**{"engine": "transformers", "model": "tiny-llama", "max_tokens": 8,
                            "timeout_s": 30.0, **kw})


def test_the_tiny_model_judges_in_its_chat_template_and_no_score_is_a_counted_error(
        tiny_model_dir, tiny_tokenizer):
    settings = _engine_settings(model=tiny_model_dir)
    backend = EngineJudge.load(settings)
    rendered = tiny_tokenizer.decode(backend.prompt_ids(render_rubric(DEFAULT_RUBRIC,
                                                                      _req(0, "It is 42."))))
    assert rendered.startswith("<|im_start|>user\nYou are grading") and "It is 42." in rendered
    assert rendered.endswith("<|im_start|>assistant\n")
    with _scorer(JudgeScorer(settings, backend)) as scorer:
        (outcome,) = scorer.score([_req(0, "It is 42.")])
        counts = scorer.metrics_since_last()
    # A random tiny model writes no "Score: N" line: an error, counted, scored 0. Within 8
    # tokens it is cut off first, and an unfinished reply is no verdict whatever it says.
    assert outcome.score == 0.0
    assert "did not finish" in outcome.error or "no score matching" in outcome.error
    assert outcome.error.startswith(f"{JUDGE_VERIFIER}: ") and not outcome.timed_out
    assert counts["reward/verifier_errors"] == 1


def test_an_engine_judge_scores_a_batch_in_one_generate_call(tiny_tokenizer):
    engine = ScriptedJudgeEngine("The answer matches.\nScore: 7")
    judge = JudgeScorer(_engine_settings(), EngineJudge(engine, tiny_tokenizer,
                                                        _engine_settings()))
    with _scorer(judge) as scorer:
        out = scorer.score([_req(0, "42"), _req(1, "41"), _req(2, "7 x 6", metadata="{}")])
        assert scorer.metrics_since_last()["reward/verifier_errors"] == 0
    assert [o.score for o in out] == [0.7, 0.7, 0.7] and len(engine.prompts) == 1
    assert engine.params.temperature == 0.0 and engine.params.max_tokens == 8
    assert engine.closed  # the scorer closes its judge


def test_a_slow_engine_judge_times_out_within_its_limit(tiny_tokenizer):
    settings = _engine_settings(timeout_s=0.3)
    judge = JudgeScorer(settings, EngineJudge(ScriptedJudgeEngine("Score: 9", delay_s=1.0),
                                              tiny_tokenizer, settings))
    with _scorer(judge) as scorer:
        start = time.monotonic()
        out = scorer.score([_req(0, "42"), _req(1, "41")])
        elapsed = time.monotonic() - start
        counts = scorer.metrics_since_last()
    assert elapsed < 0.3 + SLACK_S
    assert all(o.timed_out and o.score == 0.0 for o in out)
    assert counts["reward/verifier_timeouts"] == 2 and counts["reward/verifier_errors"] == 0


def test_a_rubric_field_the_row_lacks_is_that_row_s_error(tiny_tokenizer):
    settings = _engine_settings(rubric="{answer} on {metadata[topic]}")
    judge = JudgeScorer(settings, EngineJudge(ScriptedJudgeEngine("Score: 10"), tiny_tokenizer,
                                              settings))
    out = judge.score_batch([_req(0, "42", metadata='{"topic": "math"}'), _req(1, "42")])
    assert out[0].score == 1.0 and "rubric cannot be filled: KeyError" in out[1].error


# ------------------------------------------------------------------ OpenAI-compatible endpoint


class _Judge(BaseHTTPRequestHandler):
    """Canned judgements chosen by a word in the answer."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen.append((self.path, self.headers.get("Authorization"), body))
        prompt = body["messages"][-1]["content"]
        if "SLOW" in prompt:
            self.server.release.wait(10)
        if "HTTP500" in prompt:
            self.send_error(500, "judge overloaded")
            return
        reply = "Hmm, hard to say." if "NOSCORE" in prompt else "Correct.\nScore: 8"
        payload = (b"<html>not json</html>" if "MALFORMED" in prompt else
                   json.dumps({"choices": [{"message": {"role": "assistant",
                                                        "content": reply}}]}).encode())
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except BrokenPipeError:  # the client timed out first (the slow case): nobody listens
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def endpoint():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Judge)
    server.daemon_threads = True
    server.seen, server.release = [], threading.Event()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.release.set()  # a slow handler still waiting ends now
    server.shutdown()
    server.server_close()


def _openai_settings(server, **kw):
    host, port = server.server_address
    return JudgeSettings(**{"engine": "openai", "model": "judge-7b",
                            "base_url": f"http://{host}:{port}/v1", "api_key_env": "TEST_JUDGE_KEY",
                            "timeout_s": 1.0, **kw})


def test_the_endpoint_judge_scores_and_counts_every_failure(endpoint, monkeypatch):
    monkeypatch.setenv("TEST_JUDGE_KEY", "sk-test")
    settings = ScorerSettings(num_workers=0, judge=_openai_settings(endpoint))
    with RewardScorer.from_settings(settings) as scorer:
        start = time.monotonic()
        out = scorer.score([_req(0, "42"), _req(1, "SLOW 42"), _req(2, "MALFORMED"),
                            _req(3, "NOSCORE"), _req(4, "HTTP500"), _req(5, "it is 42")])
        elapsed = time.monotonic() - start
        counts = scorer.metrics_since_last()
    assert elapsed < 1.0 + SLACK_S  # the slow one is cut at the batch's limit
    assert out[0].score == 0.8 and out[5].score == 0.8 and not out[0].error
    assert out[1].timed_out and out[1].score == 0.0
    assert "malformed response" in out[2].error and "not json" in out[2].error
    assert "no score matching" in out[3].error and "Hmm, hard to say." in out[3].error
    assert "HTTP 500" in out[4].error
    assert counts["reward/verifier_errors"] == 3 and counts["reward/verifier_timeouts"] == 1
    path, auth, body = endpoint.seen[0]
    assert path == "/v1/chat/completions" and auth == "Bearer sk-test"
    assert body["model"] == "judge-7b" and body["temperature"] == 0.0
    assert "What is 6 times 7?" in body["messages"][0]["content"]


def test_an_unreachable_endpoint_is_an_error_and_a_missing_key_is_refused(monkeypatch):
    settings = JudgeSettings(engine="openai", model="m", base_url="http://127.0.0.1:9/v1",
                             timeout_s=2.0)
    judge = JudgeScorer(settings, OpenAIJudge(settings, None))
    (result,) = judge.score_batch([_req(0, "42")])
    assert "cannot reach http://127.0.0.1:9/v1/chat/completions" in result.error
    judge.close()
    monkeypatch.delenv("NO_SUCH_KEY", raising=False)
    with pytest.raises(ValueError, match="rewards.judge.api_key_env='NO_SUCH_KEY'"):
        JudgeScorer.from_settings(JudgeSettings(engine="openai", model="m",
                                                base_url="http://x/v1", api_key_env="NO_SUCH_KEY"))


# ------------------------------------------------------------------ config


@pytest.mark.parametrize("overrides, fields", [
    (["rewards.judge.engine=openai"], ["rewards.judge.model", "rewards.judge.base_url"]),
    (["rewards.judge.engine=transformers"], ["rewards.judge.model is missing"]),
    (["rewards.judge.model=m", "rewards.judge.rubric='Grade {answr}'"], ["rewards.judge.rubric"]),
    (["rewards.judge.model=m", "rewards.judge.rubric='{question} {'"], ["rewards.judge.rubric"]),
    (["rewards.judge.model=m", "rewards.judge.score_regex='Score: \\d+'"],
     ["rewards.judge.score_regex"]),
    (["rewards.judge.model=m", "rewards.judge.timeout_s=0"], ["timeout_s"]),
])
def test_judge_config_problems_name_their_fields(overrides, fields):
    with pytest.raises(ConfigError) as e:
        load_config(None, overrides)
    assert all(f in str(e.value) for f in fields), str(e.value)


def test_engine_names_keys_and_rows_are_checked_before_any_model_loads(monkeypatch):
    for engine in ("sglang", "remote"):  # remote: the policy's own servers
        with pytest.raises(ConfigError, match=f"rewards.judge.engine='{engine}' is not one of"):
            check_registered_names(load_config(None, [f"rewards.judge.engine={engine}",
                                                      "rewards.judge.model=m"]))
    monkeypatch.delenv("NO_SUCH_KEY", raising=False)
    with pytest.raises(ConfigError, match="rewards.judge.api_key_env='NO_SUCH_KEY'"):
        check_registered_names(load_config(None, [
            "rewards.judge.engine=openai", "rewards.judge.model=m",
            "rewards.judge.base_url=http://127.0.0.1:8000/v1",
            "rewards.judge.api_key_env=NO_SUCH_KEY"]))
    rows = [Example("essays/0", ({"role": "user", "content": "q"},), "", (JUDGE_VERIFIER,),
                    "essays")]
    loaded = LoadedData(train=[(DataSourceConfig(name="essays"), rows)], eval=[], num_bad_rows=0)
    with pytest.raises(ConfigError, match=r"\['essays'\] name the 'llm_judge' verifier"):
        check_judge_configured(load_config(None, []), loaded)
    check_judge_configured(load_config(None, ["rewards.judge.model=m"]), loaded)


def test_the_config_section_becomes_the_judge_s_settings():
    cfg = load_config(None, ["rewards.judge.model=tiny-llama", "rewards.judge.timeout_s=5",
                             "model.device=cpu"])
    s = judge_settings(cfg)
    assert s.engine == "transformers" and s.model == "tiny-llama" and s.timeout_s == 5.0
    assert s.rubric == DEFAULT_RUBRIC and s.score_regex == DEFAULT_SCORE_REGEX  # null: default
    assert s.device == "cpu" and judge_settings(load_config(None, [])) is None
