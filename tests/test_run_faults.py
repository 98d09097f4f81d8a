"""A run that cannot go on stops with its last good state and a documented exit code
(docs/faults.md), never a traceback or a run that learns nothing and exits 0:
- every sample failing its verifier for `rewards.max_failed_steps` steps in a row: exit 5,
  naming the verifier and its first error;
- an inference server alive but hung past its timeout, or answering garbage: the engine-lost
  path (state saved, the server and what happened named, exit 4), as for a dead server."""

from __future__ import annotations

import json
import time

import pytest

from rlvr.cli import main
from rlvr.config import load_config
from rlvr.run.errors import EngineLost
from rlvr.run.loop import train
from tests.certain_reward import REMAP
from tests.kill_and_resume import metrics, same_final_weights
from tests.serving.fake_server import FakeServer, running_servers

RUN = ["model.name_or_path=tiny-llama", "rollout.engine=transformers",
       "rollout.num_unique_prompts_rollout=4", "rollout.num_samples_per_prompt_rollout=4",
       "rollout.response_length=8", "data.max_prompt_length=128", "algorithm.pack_length=256",
       "data.eval_holdout=4", "eval.eval_at_start=false", "eval.local_eval_every=0",
       "checkpoint.save_final=false", "logging.progress_bar=false", "rewards.num_workers=0"]


def _verifier_rows(tmp_path, monkeypatch, module: str, body: str):
    """Rows scored by `module:score` (each test its own module: a verifier is imported once)."""
    (tmp_path / f"{module}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i} + 1?", "ground_truth": str(i + 1),
                                        "dataset": f"{module}:score"}) + "\n"
                            for i in range(40)))
    return data


def test_a_verifier_failing_every_sample_stops_the_run_with_exit_5(tmp_path, monkeypatch,
                                                                    capsys, caplog):
    data = _verifier_rows(tmp_path, monkeypatch, "my_raising_verifier",
                          "def score(completion, ground_truth):\n"
                          "    raise RuntimeError('broken verifier')\n")
    code = main(["train", *RUN, f"data.train=[{{name: {data}}}]", "experiment.total_episodes=96",
                 "rewards.custom_verifiers=[my_raising_verifier:score]",
                 f"experiment.output_dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert code == 5, err
    assert "every sample failed its verifier in 3 steps in a row (up to step 3" in err
    assert "my_raising_verifier:score: RuntimeError: broken verifier" in err
    assert "Traceback" not in err
    assert "step 1: every sample failed its verifier" in caplog.text  # warned at each step
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text()
              .splitlines()]
    assert [r["training_step"] for r in logged] == [0, 1, 2, 3]
    assert logged[-1]["reward/all_samples_failed"] == 1.0


def test_a_verifier_that_fails_now_and_then_does_not_stop_the_run(tmp_path, monkeypatch):
    # Fails every sample of odd steps only (the scorer's calls alternate): never 2 in a row.
    data = _verifier_rows(tmp_path, monkeypatch, "my_flaky_verifier",
                          "calls = [0]\n"
                          "def score(completion, ground_truth):\n"
                          "    calls[0] += 1\n"
                          "    if (calls[0] - 1) // 16 % 2 == 0:\n"
                          "        raise ValueError('odd step')\n"
                          "    return 1.0 if len(completion) % 2 else 0.0\n")
    cfg = load_config(None, [*RUN, f"data.train=[{{name: {data}}}]",
                             "experiment.total_episodes=64", "rewards.max_failed_steps=2",
                             "rewards.custom_verifiers=[my_flaky_verifier:score]",
                             f"experiment.output_dir={tmp_path / 'run'}"])
    run = train(cfg)
    failed = [h.get("reward/all_samples_failed") for h in run.history if h["training_step"] > 0]
    assert failed == [1.0, 0.0, 1.0, 0.0]


@pytest.fixture
def servers():
    with running_servers(2, vocab=250, tokens=6) as started:
        yield started


def _remote(tmp_path, servers, steps=5):
    return load_config(None, _remote_overrides(tmp_path, servers, steps))


def _remote_overrides(tmp_path, servers, steps=5) -> list[str]:
    # The fake servers sample random tokens with made-up logprobs, which the mismatch gate
    # (rlvr.run.health) rightly stops in two steps: off, so the fault each test injects is the stop.
    addresses = "[" + ",".join(s.address for s in servers) + "]"
    return [
        *RUN, "rollout.engine=remote", f"rollout.server_addresses={addresses}",
        "health.enabled=false",
        f"experiment.total_episodes={16 * steps}", f"experiment.output_dir={tmp_path}",
        "algorithm.filter_zero_std_samples=false", "checkpoint.checkpoint_state_freq=1",
        "rollout.server_request_timeout_s=0.5", "rollout.server_max_retries=1"]


def _after(server, requests: int, fault):
    """`server` answers its first `requests` generate requests, then `fault(body)`."""
    answer = server.generate
    seen = [0]

    def generate(body):
        seen[0] += 1
        return answer(body) if seen[0] <= requests else fault(body)

    server.generate = generate


def _saved_steps(tmp_path):
    return sorted(p.name for p in (tmp_path / "state").iterdir() if p.name.startswith("step"))


def test_a_hung_server_saves_the_state_and_stops_as_engine_lost(tmp_path, servers):
    def hang(body):  # alive (it answers /health) but silent past the request timeout
        time.sleep(3)
        return 500, {"error": "too late"}

    for s in servers:
        _after(s, 4, hang)  # 4 requests a step over both servers: step 3 hangs
    with pytest.raises(EngineLost) as lost:
        train(_remote(tmp_path, servers))
    message = str(lost.value)
    assert message.startswith("step 3: inference server http://127.0.0.1:")
    assert "ReadTimeout" in message and "training state of step 2" in message
    assert _saved_steps(tmp_path)[-1] == "step_000002"


def test_a_server_answering_garbage_saves_the_state_and_stops_as_engine_lost(tmp_path, servers):
    for s in servers:
        _after(s, 4, lambda body: (200, {"choices": [{"index": 0, "token_ids": "garbage"}]}))
    with pytest.raises(EngineLost) as lost:
        train(_remote(tmp_path, servers))
    assert "unreadable generate answer" in str(lost.value)
    assert "training state of step 2" in str(lost.value)
    assert _saved_steps(tmp_path)[-1] == "step_000002"


def _aborting(server: FakeServer, body: dict):
    """The answer a vLLM server gives every request in flight when it is stopped: 200, each
    sample "abort" with the tokens made so far."""
    server.abort_generate = 1
    return FakeServer.generate(server, body)


def test_samples_a_server_aborted_are_never_trained_on_and_a_rerun_resumes_exactly(tmp_path):
    """Issue 53: a Slurm requeue stops the trainer and the servers at once, and a stopping vLLM
    answers "abort" to what it was generating. Those samples, cut short, were trained on as
    finished ("stop") and the step saved as the last good state, so the resumed run departed
    from an uninterrupted one. Here the servers abort everything from step 3 on (staying up, so
    the old code trained on it every step): the run stops at step 3 with step 2's state, and
    the same command with servers back resumes to the uninterrupted run's metrics and weights."""
    def run(out, faulty: bool = False):
        with running_servers(2, vocab=250, tokens=6) as servers:
            if faulty:
                for s in servers:
                    _after(s, 4, lambda body, s=s: _aborting(s, body))  # 4 a step: step 3
            train(load_config(None, [*_remote_overrides(out, servers), REMAP,
                                     "checkpoint.save_final=true"]))

    run(tmp_path / "straight")
    with pytest.raises(EngineLost) as lost:
        run(tmp_path / "run", faulty=True)
    assert "unfinished" in str(lost.value) and "'abort'" in str(lost.value)
    assert "training state of step 2" in str(lost.value)
    run(tmp_path / "run")  # other servers: rollout.server_addresses may differ on a rerun
    assert metrics(tmp_path / "run") == metrics(tmp_path / "straight")
    assert same_final_weights(tmp_path / "run", tmp_path / "straight")


def test_engine_lost_is_exit_4_in_one_line(tmp_path, servers, capsys):
    for s in servers:
        _after(s, 0, lambda body: (200, {"choices": "garbage"}))
    addresses = "[" + ",".join(s.address for s in servers) + "]"
    code = main(["train", *RUN, "rollout.engine=remote", f"rollout.server_addresses={addresses}",
                 "experiment.total_episodes=32", f"experiment.output_dir={tmp_path}"])
    err = capsys.readouterr().err
    assert code == 4 and "Traceback" not in err, err
    assert "step 1: inference server" in err and "start the servers again" in err


def test_a_gpu_without_room_for_one_row_stops_the_run_with_exit_2(tmp_path, monkeypatch,
                                                                   capsys):
    """The memory plan (a GPU's allocator figures faked on CPU, the probe passes real) finds
    not one packed row fits, even with checkpointing: one line naming pack_length and what to
    change, exit 2, before any optimizer step."""
    from tests.learner.test_memory_plan import _FakeDevice

    _FakeDevice(monkeypatch, free_gib=100 * 0.08 + 0.5, per_token_mib={False: 64.0, True: 16.0})
    code = main(["train", *RUN, "experiment.total_episodes=32",
                 f"experiment.output_dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "one packed row of 256 tokens (algorithm.pack_length) needs about" in err
    assert "model.max_memory_gb" in err and "Traceback" not in err
    assert not (tmp_path / "run" / "state").exists()


def test_a_full_disk_during_a_state_save_exits_7_keeping_the_last_state(tmp_path, monkeypatch,
                                                                        capsys):
    """It ended in exit 1 and a traceback (torch's "unexpected pos"), the one thing
    docs/faults.md calls a bug."""
    import errno

    from rlvr.checkpoint import state as state_module
    from rlvr.checkpoint.state import list_states, load_latest_state

    real_save_file = state_module.save_file

    def disk_full_at_step_3(tensors, path):
        if path.parent.name == ".tmp-step_000003":
            path.write_bytes(b"half a tensor")  # the disk fills mid-file
            raise OSError(errno.ENOSPC, "No space left on device")
        real_save_file(tensors, path)

    monkeypatch.setattr(state_module, "save_file", disk_full_at_step_3)
    out = tmp_path / "run"
    args = ["train", *RUN, "experiment.total_episodes=64", "checkpoint.checkpoint_state_freq=1",
            "algorithm.filter_zero_std_samples=false", f"experiment.output_dir={out}"]
    code = main(args)
    err = capsys.readouterr().err
    assert code == 7, err
    assert (f"rlvr: writing the training state {out}/state/step_000003 failed (OSError: "
            "[Errno 28] No space left on device); nothing half-written is left, and the last "
            f"training state before it is kept: {out}/state/step_000002: free space and rerun "
            "the same command to resume") in err
    assert "Traceback" not in err
    assert sorted(p.name for p in (out / "state").iterdir()) == ["step_000001", "step_000002"]
    monkeypatch.undo()  # space freed: the rerun resumes from step 2
    assert main(args) == 0
    assert load_latest_state(out / "state").step == 4 and len(list_states(out / "state")) == 2
    assert [json.loads(line)["training_step"] for line in (out / "metrics.jsonl").open()] == [
        0, 1, 2, 3, 4]
