"""The composition matrix (tests/composition/matrix.py): every pair of feature settings runs
together or is refused at config time with its reason.

Fast (`make test`): docs/composition.md is the matrix's current page, and each refused pair
exits 2 from `rlvr train` naming its reason before anything is built. Slow (`make test-slow`):
each row of the covering array trains configs/tiny.yaml for two steps with an eval before and
after, in a process of its own, and checks every metric is finite and eval played the run's
workflow; a row with `resume=after_kill` is also killed (SIGKILL) once step 1's state is saved,
rerun, and must repeat the uninterrupted run's step 2 and final weights."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.serving.server import free_port
from tests.composition.matrix import (FACTORS, ROOT, TINY, covering_rows, markdown,
                                      overrides_of, pair_refusal, refused_from_page,
                                      refused_pairs, row_id, rows_from_page)
from tests.certain_reward import REMAP
from tests.kill_and_resume import TIMING, kill_after_step, same_safetensors

DOC = ROOT / "docs" / "composition.md"
# From the page, which the first test checks is the matrix computed now.
ROWS = rows_from_page(DOC.read_text())
REFUSED = refused_from_page(DOC.read_text())
STEPS = 2
RUN_TIMEOUT_S = 900  # a row with inference servers starts vLLM (50-100 s here) twice
# Eval sets' workflow figures, as the trainer logs them for training under workflow/ and tools/
WORKFLOW_METRICS = {"multi_turn": "/workflow/turns_mean", "tool_use": "/tools/calls",
                    "custom": "/workflow/errors", "single_turn": "/workflow/errors"}


def test_the_docs_page_is_the_matrix():
    """The page is the matrix computed now (the tests below read its rows and refusals), and
    its rows cover every allowed pair and hold no refused one."""
    assert DOC.read_text() == markdown(), (
        "docs/composition.md is stale: python -m tests.composition.matrix > docs/composition.md")
    assert ROWS == covering_rows() and REFUSED == list(refused_pairs())
    refused = refused_pairs()
    covered = set()
    for row in ROWS:
        settings = list(row.items())
        pairs = {(a, b) for i, a in enumerate(settings) for b in settings[i + 1:]}
        assert not pairs & set(refused), row
        covered |= pairs
    features = list(FACTORS)
    every = {((f, s), (g, t)) for i, f in enumerate(features) for g in features[i + 1:]
             for s in FACTORS[f] for t in FACTORS[g]}
    assert every - set(refused) <= covered


@pytest.mark.parametrize("pair", REFUSED, ids=lambda p: f"{p[0][1]}+{p[1][1]}")
def test_a_refused_pair_exits_2_naming_its_reason(pair, tmp_path, capsys):
    reason = pair_refusal(*pair).removeprefix("invalid config: ").splitlines()[0]
    out = tmp_path / "run"
    assert main(["train", TINY, *overrides_of(dict(pair)), f"experiment.output_dir={out}"]) == 2
    assert reason in capsys.readouterr().err
    assert not out.exists()  # refused before anything was written


def _base(out: Path, row: dict[str, str], port: int) -> list[str]:
    episodes = STEPS * 16  # configs/tiny.yaml: 4 prompts x 4 samples a step
    base = [f"experiment.output_dir={out}", f"experiment.total_episodes={episodes}",
            "eval.local_eval_every=2", "eval.eval_at_start=true", "eval.max_prompts=4",
            "checkpoint.checkpoint_state_freq=1", "checkpoint.save_freq=0",
            "logging.progress_bar=false", "rewards.num_workers=0",
            # every group has a spread of rewards, so every step updates (active sampling too)
            REMAP, "health.enabled=false"]
    if row["engine"] == "remote":
        # one port for a row's runs: a resumed run is the same config as the killed one
        base += [f"rollout.server_port={port}", "rollout.server_startup_timeout_s=600"]
    return base


def _cmd(out: Path, row: dict[str, str], port: int = 0) -> list[str]:
    return [sys.executable, "-m", "rlvr.cli", "train", TINY, *overrides_of(row),
            *_base(out, row, port)]


def _cancel_slurm_jobs() -> None:
    """SIGKILL of `rlvr train` leaves its Slurm job running (a preempted job is cancelled by
    Slurm, not by its submitter): cancel the job as Slurm would, and wait until it is gone."""
    jobs = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True,
                          timeout=60).stdout.split()
    if jobs:
        subprocess.run(["scancel", "--full", "--signal=KILL", *jobs], timeout=60)
        subprocess.run(["scancel", *jobs], timeout=60)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and subprocess.run(
            ["squeue", "-h", "-o", "%i"], capture_output=True, text=True,
            timeout=60).stdout.split():
        time.sleep(1)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SLURM_") and k != "RLVR_LLM_SERVER_ADDRS"}
    return {**env, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def _run(cmd: list[str], log: Path) -> None:
    with open(log, "wb") as sink:
        rc = subprocess.run(cmd, cwd=ROOT, env=_env(), stdout=sink, stderr=subprocess.STDOUT,
                            timeout=RUN_TIMEOUT_S).returncode
    assert rc == 0, log.read_text(errors="replace")[-4000:]


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _same_final_files(a: Path, b: Path) -> bool:
    """The final model (or a LoRA run's adapter): every safetensors file, tensor by tensor."""
    names = sorted(p.name for p in (a / "final").glob("*.safetensors"))
    return bool(names) and names == sorted(p.name for p in (b / "final").glob("*.safetensors")) \
        and all(same_safetensors(a / "final" / n, b / "final" / n) for n in names)


def _marks(row: dict[str, str]) -> list:
    marks = [pytest.mark.slow, pytest.mark.timeout(3 * RUN_TIMEOUT_S)]
    if row["launcher"] != "local" or row["engine"] != "transformers":
        marks.append(pytest.mark.component)  # vLLM, servers, Ray, Slurm or ranks of their own
    # One worker at a time per component (tests/conftest.py): a Ray row never beside another
    # Ray cluster, a Slurm row in the worker that holds the session's Slurm cluster, and the
    # other rows one after another (each is already two processes on 2 cores).
    group = {"ray": "ray", "slurm": "slurm"}.get(row["launcher"], "composition")
    marks.append(pytest.mark.xdist_group(group))
    return marks


@pytest.mark.parametrize("row", [pytest.param(r, id=row_id(r) or "defaults", marks=_marks(r))
                                 for r in ROWS])
def test_a_row_of_the_matrix_trains_evaluates_and_resumes(row, tmp_path, request):
    if row["launcher"] == "slurm":
        request.getfixturevalue("local_slurm")
    if row["launcher"] == "ray":
        pytest.importorskip("ray", reason="the ray extra is not installed")
    if row["engine"] != "transformers" or row["launcher"] == "slurm":
        pytest.importorskip("vllm", reason="the vllm extra is not installed",
                            exc_type=ImportError)
    straight, port = tmp_path / "straight", free_port()
    _run(_cmd(straight, row, port), tmp_path / "straight.log")
    rows = _rows(straight)
    assert [r["training_step"] for r in rows] == list(range(STEPS + 1))
    bad = {k: v for r in rows for k, v in r.items() if v is None or (
        isinstance(v, float) and not math.isfinite(v))}
    assert not bad, f"metrics not finite: {bad}"
    assert all("loss/total_avg" in r for r in rows[1:])  # every step updated
    for step in (0, STEPS):  # eval played the run's workflow, before and after training
        played = [k for k in rows[step] if k.startswith("eval/")
                  and k.endswith(WORKFLOW_METRICS[row["workflow"]])]
        assert played, sorted(rows[step])
    if row["resume"] == "after_kill":
        killed = tmp_path / "killed"
        kill_after_step(_cmd(killed, row, port), killed, 1, _env(), timeout_s=RUN_TIMEOUT_S)
        if row["launcher"] == "slurm":
            _cancel_slurm_jobs()
        _run(_cmd(killed, row, port), tmp_path / "resumed.log")
        resumed = _rows(killed)
        assert [r["training_step"] for r in resumed] == list(range(STEPS + 1))
        untimed = [{k: v for k, v in r.items() if not k.startswith(TIMING)}
                   for r in (rows[STEPS], resumed[STEPS])]
        assert untimed[1] == untimed[0]
        assert _same_final_files(straight, killed)
