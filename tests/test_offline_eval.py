"""`rlvr eval MODEL_OR_CHECKPOINT CONFIG`: the training loop's evaluation, outside training."""

import io
import json
import shutil

import pytest
from rich.console import Console

from rlvr.cli import main
from rlvr.run.offline_eval import print_table

FAST = ["rewards.num_workers=0", "logging.progress_bar=false"]
SAMPLED = ["eval.num_samples=2", "eval.temperature=1.0", "eval.pass_at_k=[1,2]"]


def test_eval_of_a_built_in_model_prints_a_table_and_writes_results(tmp_path, capsys):
    assert main(["eval", "tiny-llama", "configs/tiny.yaml", *SAMPLED, *FAST,
                 f"experiment.output_dir={tmp_path}"]) == 0
    record = json.loads((tmp_path / "eval" / "tiny-llama.json").read_text())
    assert record["model"] == "tiny-llama" and record["step"] is None
    assert record["eval"]["num_samples"] == 2 and record["eval"]["pass_at_k"] == [1, 2]
    figures = record["sets"]["addition"]  # the holdout, named after the train source
    assert figures["num_prompts"] == 8
    assert set(figures) >= {"pass@1", "pass@2", "maj@2", "mean_reward", "stop_rate",
                            "sequence_lengths"}
    assert 0.0 <= figures["pass@1"] <= figures["pass@2"] <= 1.0
    assert record["metrics"]["eval/addition/pass@2"] == figures["pass@2"]
    out = capsys.readouterr().out
    assert "addition" in out and "pass@2" in out and "eval/tiny-llama.json" in out


def test_eval_of_a_checkpoint_writes_beside_it_and_matches_the_runs_own_eval(tmp_path, capsys):
    """The results were written into the checkpoint's directory (a shared base model's too,
    and a second config overwrote the first's); now into experiment.output_dir/eval/."""
    run_dir = tmp_path / "run"
    common = ["configs/tiny.yaml", *SAMPLED, *FAST, f"experiment.output_dir={run_dir}"]
    # One step, whose step-0 eval scores the untrained model: the same weights as tiny-llama.
    assert main(["train", *common, "experiment.total_episodes=16", "eval.local_eval_every=0",
                 "algorithm.beta=0", "checkpoint.save_freq=0", "checkpoint.save_final=false"]) == 0
    logged = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    checkpoint = tmp_path / "checkpoints" / "step_000000"
    from rlvr.models import resolve_model_dir

    shutil.copytree(resolve_model_dir("tiny-llama"), checkpoint)
    (checkpoint / "rlvr_checkpoint.json").write_text('{"step": 0}')
    before = sorted(p.name for p in checkpoint.iterdir())
    assert main(["eval", str(checkpoint), *common]) == 0
    assert sorted(p.name for p in checkpoint.iterdir()) == before
    label = str(checkpoint).strip("/").replace("/", "--")
    record = json.loads((run_dir / "eval" / f"{label}.json").read_text())
    assert record["step"] == 0 and record["model"] == str(checkpoint)
    assert record["config"]["files"] == ["configs/tiny.yaml"]
    for key, value in record["metrics"].items():
        assert logged[key] == pytest.approx(value), key


def test_output_path_and_bad_input(tmp_path, capsys):
    out = tmp_path / "deep" / "r.json"
    assert main(["eval", "tiny-llama", "configs/tiny.yaml", *FAST, "eval.max_prompts=2",
                 "data.eval=[{name: addition, split: test}, {name: multiplication, label: mul}]",
                 f"experiment.output_dir={tmp_path}", "--output", str(out)]) == 0
    record = json.loads(out.read_text())
    assert {name: s["num_prompts"] for name, s in record["sets"].items()} == {"addition": 2,
                                                                              "mul": 2}
    assert "eval/mul/pass@1" in record["metrics"] and not (tmp_path / "eval_results.json").exists()
    capsys.readouterr()
    assert main(["eval", "tiny-llama", "configs/tiny.yaml", "eval.num_samples=2",
                 "eval.temperature=1.0", "eval.pass_at_k=[4]"]) == 2
    assert "eval.pass_at_k holds k=4" in capsys.readouterr().err
    assert main(["eval", "tiny-llama", "eval.num_samples=2"]) == 2
    assert "needs a config file" in capsys.readouterr().err
    assert main(["eval", "no-such-model", "configs/tiny.yaml", *FAST,
                 f"experiment.output_dir={tmp_path}"]) == 2


def test_table_marks_figures_a_set_lacks():
    record = {"model": "m", "eval": {"num_samples": 4, "temperature": 0.6},
              "sets": {"gsm8k": {"num_prompts": 3, "pass@1": 0.5, "maj@4": 0.75},
                       "ifeval": {"num_prompts": 2, "pass@1": 0.25}}}
    console = Console(file=io.StringIO(), width=120)
    print_table(record, console)
    text = console.file.getvalue()
    assert "maj@4" in text and "0.750" in text
    assert [line.split()[-1] for line in text.splitlines() if "ifeval" in line] == ["-"]
