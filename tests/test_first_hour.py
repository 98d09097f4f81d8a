"""The first hour, walked as a newcomer walks it: `rlvr train` without a config (its usage),
the tiny run, a rerun with a changed learning rate (refused, naming the field), the same with
`--overwrite` (trains, the earlier run moved aside), `rlvr eval` into an output directory (the
model's directory unchanged). On the code before, `rlvr train` alone trained a default run into
./runs/rlvr, the changed rerun said "finished" and exited 0 having trained nothing, there was no
--overwrite, and `rlvr eval` wrote eval_results.json into the model's directory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rlvr.cli import main

FAST = ["logging.progress_bar=false", "rewards.num_workers=0", "experiment.total_episodes=32",
        "eval.eval_at_start=false"]  # 2 steps of configs/tiny.yaml


def _files(path):
    return {p.relative_to(path): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def test_the_first_hour(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where a default run would land (./runs/rlvr)
    config = str(Path(__file__).parents[1] / "configs" / "tiny.yaml")
    assert main(["train"]) == 2  # to see the usage
    err = capsys.readouterr().err
    assert "usage: rlvr train" in err and "name a config file" in err
    assert not (tmp_path / "runs").exists()

    out = tmp_path / "runs" / "tiny"
    run = ["train", config, *FAST, f"experiment.output_dir={out}"]
    assert main(run) == 0
    trained = _files(out)

    assert main([*run, "optimizer.learning_rate=1e-4"]) == 2
    err = capsys.readouterr().err
    assert "of another config: optimizer.learning_rate: 0.001 -> 0.0001." in err, err
    assert "rlvr train --overwrite" in err and "Traceback" not in err
    assert _files(out) == trained  # nothing touched

    assert main([*run, "optimizer.learning_rate=1e-4", "--overwrite"]) == 0
    assert _files(tmp_path / "runs" / "tiny.old-1") == trained  # the first run, kept whole
    assert "learning_rate: 0.0001" in (out / "config.yaml").read_text()
    assert [json.loads(line)["training_step"] for line in open(out / "metrics.jsonl")] == [0, 1, 2]

    model = out / "final"
    before = _files(model)
    evals = tmp_path / "evals"
    assert main(["eval", str(model), config, "rewards.num_workers=0", "eval.max_prompts=4",
                 f"experiment.output_dir={evals}"]) == 0
    assert _files(model) == before  # the model's directory unchanged
    record = json.loads((evals / "eval" / f"{str(model).strip('/').replace('/', '--')}.json")
                        .read_text())
    assert record["model"] == str(model)
    assert record["config"] == {"files": [config], "overrides": ["rewards.num_workers=0",
                                                                 "eval.max_prompts=4",
                                                                 f"experiment.output_dir={evals}"]}
    capsys.readouterr()
    assert main(["eval", str(model), config, "--output", str(model / "r.json")]) == 2
    assert "inside the model's directory" in capsys.readouterr().err
    assert _files(model) == before


def test_rlvr_help_imports_no_torch(tmp_path):
    """`rlvr --help` took 6 s: cli.py imported torch through the exceptions it maps to exit
    codes; `rlvr train` without a config took as long to print its usage."""
    probe = ("import sys\nfrom rlvr.cli import main\n"
             "for argv in (['--help'], ['train']):\n"
             "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers'}))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)  # a `train` that trains lands there
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_generate_with_several_answers_samples_them(capsys):
    """`rlvr generate --n 3` printed three identical greedy answers: temperature 0 was the
    default whatever --n asked. Several answers now sample (temperature 1.0), one stays greedy."""
    assert main(["generate", "tiny-llama", "--prompt", "1+1?", "--n", "3", "--max-tokens",
                 "12"]) == 0
    answers = capsys.readouterr().out.split("\n[")  # random weights: answers hold newlines
    assert len(answers) == 3 and len(set(answers)) > 1, answers
    assert main(["generate", "tiny-llama", "--prompt", "1+1?", "--n", "1", "--max-tokens",
                 "12"]) == 0
    assert len(capsys.readouterr().out.split("\n[")) == 1


def test_no_declared_dependency_goes_unused():
    """`accelerate` was declared and imported by nothing."""
    import tomllib

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert not [d for d in project["project"]["dependencies"] if d.startswith("accelerate")]
