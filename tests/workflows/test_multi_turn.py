"""`multi_turn`: feedback after a wrong answer, turn structure, masks, versions, discount."""

from rlvr.producer.groups import RewardShaping
from rlvr.rewards.scorer import RewardScorer
from rlvr.types import SamplingParams
from rlvr.workflows import EpisodeRunner, WorkflowSettings
from rlvr.workflows.multi_turn import multi_turn

from tests.workflows.conftest import TurnScriptedEngine


def _run(tokenizer, prompt, script, truncate_turns=(), shaping=RewardShaping(), **settings):
    engine = TurnScriptedEngine(tokenizer, script, truncate_turns)
    with RewardScorer(num_workers=0) as scorer:
        runner = EpisodeRunner(multi_turn, engine, scorer, tokenizer,
                               WorkflowSettings(**{"max_turns": 3, "turn_discount": 0.5,
                                                   **settings}))
        episodes, metrics = runner.run([prompt], SamplingParams(n=2, max_tokens=64, seed=5),
                                       shaping)
        runner.close()
    return engine, episodes, metrics


def test_a_wrong_answer_gets_feedback_and_a_second_try(tiny_tokenizer, chat_prompt):
    prompt = chat_prompt()
    engine, episodes, metrics = _run(tiny_tokenizer, prompt, ["41", "42"])
    sample = episodes.groups[0][0]
    c = sample.completion
    first = tiny_tokenizer.encode("41", add_special_tokens=False) + [engine.end]
    second = tiny_tokenizer.encode("42", add_special_tokens=False) + [engine.end]
    given = c.token_ids_T[len(first):len(c.token_ids_T) - len(second)]
    # The model's tokens untouched, the feedback turn between them, exactly as the engine saw.
    assert c.token_ids_T == first + given + second
    assert tiny_tokenizer.decode(given) == (
        "\n<|im_start|>user\nYour answer is incorrect. Think again and give a corrected final "
        "answer.<|im_end|>\n<|im_start|>assistant\n")
    assert c.loss_mask_T == [1] * len(first) + [0] * len(given) + [1] * len(second)
    assert c.logprobs_T == [-0.25] * len(first) + [0.0] * len(given) + [-0.25] * len(second)
    # The scripted engine stamps turn t with version t: each token keeps the one that made it.
    assert c.versions_T == [0] * (len(first) + len(given)) + [1] * len(second)
    assert c.model_version == 0  # staleness is judged by the oldest token
    second_request = engine.requests[1][0]
    assert second_request == list(prompt.token_ids) + first + given
    assert engine.requests[1][1].n == 1 and engine.requests[1][1].seed != 5
    assert sample.reward == 0.5  # right at the second turn: one discount
    assert episodes.outcomes[0][0].score == 1.0
    assert metrics["workflow/turns_mean"] == 2.0 and metrics["workflow/retried_mean"] == 1.0


def test_a_right_first_answer_is_one_plain_turn(tiny_tokenizer, chat_prompt):
    engine, episodes, metrics = _run(tiny_tokenizer, chat_prompt(), ["42"])
    c = episodes.groups[0][0].completion
    assert c.loss_mask_T is None and episodes.groups[0][0].reward == 1.0
    assert len(engine.requests) == 1 and metrics["workflow/turns_mean"] == 1.0


def test_turns_stop_at_max_turns_at_truncation_and_at_the_token_budget(tiny_tokenizer,
                                                                       chat_prompt):
    _, episodes, metrics = _run(tiny_tokenizer, chat_prompt(), ["1", "2", "3", "4"])
    assert metrics["workflow/turns_mean"] == 3.0 and episodes.groups[0][0].reward == 0.0
    _, episodes, metrics = _run(tiny_tokenizer, chat_prompt(), ["1", "42"], truncate_turns={0})
    assert metrics["workflow/turns_mean"] == 1.0  # cut off: no retry after an unfinished turn
    _, episodes, metrics = _run(tiny_tokenizer, chat_prompt(), ["1", "42"],
                                max_episode_tokens=10)
    assert metrics["workflow/turns_mean"] == 1.0  # the feedback alone would not fit


def test_a_penalty_is_not_discounted_by_the_retries_spent_before_it(tiny_tokenizer,
                                                                    chat_prompt):
    """Discounted with the score, the non-stop penalty shrank from -1 to -0.25 after two
    wrong answers: spending retries before a cut-off answer paid."""
    cut_off = RewardShaping(non_stop_penalty=True, non_stop_penalty_value=-1.0)
    _, at_once, _ = _run(tiny_tokenizer, chat_prompt(), ["41 and on"], {0}, cut_off)
    _, after_retries, _ = _run(tiny_tokenizer, chat_prompt(), ["41", "40", "39 and on"], {2},
                               cut_off)
    assert at_once.groups[0][0].reward == after_retries.groups[0][0].reward == -1.0


def test_the_overlong_penalty_counts_every_turn_not_the_last_one_only(tiny_tokenizer,
                                                                      chat_prompt):
    """Shaped on the last turn alone, a retry after a wrong answer that ran to the length
    limit escaped DAPO's overlong penalty: every turn is one generation against the limit."""
    long_wrong = " ".join(["41"] * 18)  # within a turn's 64 tokens, past max_tokens - buffer
    n_long = len(tiny_tokenizer.encode(long_wrong, add_special_tokens=False)) + 1
    n_right = len(tiny_tokenizer.encode("42", add_special_tokens=False)) + 1
    shaping = RewardShaping(overlong_buffer=16, max_tokens=n_long, overlong_penalty_factor=1.0)
    _, episodes, metrics = _run(tiny_tokenizer, chat_prompt(), [long_wrong, "42"],
                                shaping=shaping, turn_discount=1.0)
    # The second turn is right (score 1) and short; the first reached the limit: -1.
    assert n_right < n_long - 16 and n_long <= 64 and metrics["workflow/turns_mean"] == 2.0
    assert episodes.groups[0][0].reward == 0.0
    _, short, _ = _run(tiny_tokenizer, chat_prompt(), ["41", "42"], shaping=shaping,
                       turn_discount=1.0)
    assert short.groups[0][0].reward == 1.0
