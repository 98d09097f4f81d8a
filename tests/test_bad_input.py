"""Bad input ends in one line on stderr and exit status 2, before any model loads and before
any file of the run directory is written; RLVR_DEBUG=1 adds the traceback. Each case is a row
of the bad-input table in docs/faults.md."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlvr.cli import main

from tests.cli_checks import fails_in_one_line

# The smallest run (configs/tiny.yaml's essentials, kept here so these cases do not move with it).
TINY_YAML = """\
model: {name_or_path: tiny-llama}
data: {train: [{name: addition}], eval_holdout: 8, max_prompt_length: 128}
rollout: {engine: transformers, num_unique_prompts_rollout: 4, num_samples_per_prompt_rollout: 4,
          response_length: 16}
experiment: {total_episodes: 48}
algorithm: {pack_length: 256}
logging: {progress_bar: false}
"""


@pytest.fixture
def TINY(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY_YAML)
    return str(path)


def _rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _addition_rows(n):
    return [{"prompt": f"{i} + 1?", "ground_truth": str(i + 1), "dataset": "last_number"}
            for i in range(n)]


_fails = fails_in_one_line  # `rlvr ARGS` refused in one line naming the problem


def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("optimizer:\n  learning_rate: [1\n")
    _fails(capsys, ["config", str(bad)], f"config file {bad} is not valid YAML", "line 3")


def test_a_top_level_list_is_not_a_config(tmp_path, capsys):
    listed = tmp_path / "list.yaml"
    listed.write_text("- optimizer\n- model\n")
    _fails(capsys, ["train", str(listed)], f"config file {listed} holds a list")


def test_a_directory_is_not_a_config(tmp_path, capsys):
    _fails(capsys, ["train", str(tmp_path)], f"config file {tmp_path} is a directory")


def test_rlvr_debug_adds_the_traceback(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RLVR_DEBUG", "1")
    assert main(["config", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and f"rlvr: config file {tmp_path} is a directory" in err


def test_a_verifier_field_that_is_a_number_names_the_row(tmp_path, capsys, TINY):
    data = _rows(tmp_path / "rows.jsonl", _addition_rows(40) + [
        {"prompt": "2 + 2?", "ground_truth": "4", "dataset": 7}])
    _fails(capsys, ["train", TINY, f"data.train=[{{name: {data}}}]",
                    f"experiment.output_dir={tmp_path / 'run'}"],
           f"{data} line 41 field 'dataset'", "expected a verifier name or list of names, got 7")


def test_an_empty_dataset_names_the_file(tmp_path, capsys, TINY):
    data = tmp_path / "empty.jsonl"
    data.write_text("")
    _fails(capsys, ["train", TINY, f"data.train=[{{name: {data}}}]",
                    f"experiment.output_dir={tmp_path / 'run'}"], f"{data}: holds no rows")


def test_a_holdout_that_takes_every_row_names_the_file_and_the_holdout(tmp_path, capsys, TINY):
    data = _rows(tmp_path / "few.jsonl", _addition_rows(5))
    _fails(capsys, ["train", TINY, f"data.train=[{{name: {data}}}]", "data.eval_holdout=8",
                    f"experiment.output_dir={tmp_path / 'run'}"],
           f"{data}: data.eval_holdout=8 holds out all 5", "lower data.eval_holdout")


def test_an_oversized_row_is_refused_before_it_is_parsed(tmp_path, capsys, TINY):
    data = tmp_path / "big.jsonl"
    with open(data, "w") as f:
        f.write(json.dumps({"prompt": "x " * 1_000_000, "ground_truth": "1",
                            "dataset": "last_number"}) + "\n")
        f.writelines(json.dumps(r) + "\n" for r in _addition_rows(40))
    start = time.perf_counter()
    _fails(capsys, ["train", TINY, f"data.train=[{{name: {data}}}]", "data.max_row_bytes=100000",
                    f"experiment.output_dir={tmp_path / 'run'}"],
           f"{data} line 1", "over data.max_row_bytes=100000")
    assert time.perf_counter() - start < 30  # no model loaded, the row never parsed


def test_a_20_mb_row_is_skipped_in_bounded_pieces(tmp_path):
    """The default bound refuses a 20 MB line without holding it, fast (it once cost 60 s and
    4.5 GB before being dropped as too long)."""
    import tracemalloc

    from rlvr.data.readers import iter_jsonl

    data = tmp_path / "huge.jsonl"
    with open(data, "w") as f:
        f.write('{"prompt": "' + "y" * 20_000_000 + '"}\n{"prompt": "ok"}\n')
    start = time.perf_counter()
    tracemalloc.start()
    rows = list(iter_jsonl(data))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert time.perf_counter() - start < 5
    assert peak < 12_000_000  # bounded pieces, never the whole line
    assert "20,000,015 bytes, over data.max_row_bytes=4000000" in str(rows[0][1])
    assert rows[1] == (1, {"prompt": "ok"})


def test_a_parquet_row_over_the_bound_is_refused_unread_and_a_reader_stops_at_max_rows(
        tmp_path):
    """Parquet compresses: 13 kB held a 400 MiB row, and the whole table was materialised
    before any bound (gigabytes for a file of kilobytes, max_rows or not)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rlvr.data.readers import iter_parquet

    path = tmp_path / "bomb.parquet"
    with pq.ParquetWriter(path, pa.schema([("prompt", pa.string())]),
                          compression="zstd") as writer:
        writer.write_table(pa.table({"prompt": ["y" * 50_000_000]}))  # a row group of its own
        writer.write_table(pa.table({"prompt": ["ok"] * 100_000}))
    assert path.stat().st_size < 1_000_000
    rows = iter_parquet(path)
    first, second = next(rows), next(rows)
    assert "over data.max_row_bytes=4000000" in str(first[1]) and second == (1, {"prompt": "ok"})
    # The memory it took, in a process of its own: neither the big row (50 MB, twice over as
    # Arrow and Python text) nor the whole table (100k rows). VmHWM, the peak of this process's
    # memory (getrusage's peak survives exec: it would be the parent's).
    probe = (f"import pyarrow.parquet\nfrom rlvr.data.readers import iter_parquet\n"
             f"peak = lambda: int(next(line.split()[1] for line in open('/proc/self/status')\n"
             f"                       if line.startswith('VmHWM')))\n"
             f"before = peak()\nrows = iter_parquet({str(path)!r})\nnext(rows), next(rows)\n"
             f"print(peak() - before)")
    grown_kb = int(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                                  check=True, timeout=120).stdout)
    assert grown_kb < 30_000


def test_a_jsonl_row_nested_too_deeply_is_a_bad_row_not_a_crash(tmp_path):
    from rlvr.data.readers import iter_jsonl

    data = tmp_path / "deep.jsonl"
    data.write_text("[" * 200_000 + "\n" + '{"prompt": "ok"}\n')
    rows = list(iter_jsonl(data))
    assert "nested too deeply" in str(rows[0][1]) and rows[1] == (1, {"prompt": "ok"})


def test_a_misspelt_custom_verifier_fails_before_the_model_loads(tmp_path, capsys, TINY):
    rows = [dict(r, dataset="no_such_module_xyz:score") for r in _addition_rows(40)]
    data = _rows(tmp_path / "rows.jsonl", rows)
    _fails(capsys, ["train", TINY, f"data.train=[{{name: {data}}}]",
                    "rewards.custom_verifiers=[no_such_module_xyz:score]",
                    f"experiment.output_dir={tmp_path / 'run'}"],
           "verifier 'no_such_module_xyz:score'", str(data), "ModuleNotFoundError")
    assert not (tmp_path / "run").exists()


def test_data_cannot_name_a_function_to_import_that_the_config_does_not_list(
        tmp_path, capsys, TINY, monkeypatch):
    """A dataset picked the code the scorer imported and called on the policy's text: a row
    naming `shutil:rmtree` would have had a directory the policy named deleted."""
    (tmp_path / "my_verifiers_unlisted.py").write_text("raise SystemExit('imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("my_verifiers_unlisted:score", "shutil:rmtree"):
        rows = [dict(r, dataset=name) for r in _addition_rows(40)]
        data = _rows(tmp_path / "rows.jsonl", rows)
        _fails(capsys, ["train", TINY, f"data.train=[{{name: {data}}}]",
                        f"experiment.output_dir={tmp_path / 'run'}"],
               f"verifier '{name}' (named by {data}) is a function to import and run, which "
               f"the data cannot choose: list it in the config, "
               f"rewards.custom_verifiers=['{name}']")
    assert not (tmp_path / "run").exists()


def test_a_custom_verifier_with_the_wrong_signature_fails_at_start(tmp_path, capsys, TINY,
                                                                   monkeypatch):
    (tmp_path / "my_verifiers_sig.py").write_text("def one_arg(text):\n    return 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    rows = [dict(r, dataset="my_verifiers_sig:one_arg") for r in _addition_rows(40)]
    data = _rows(tmp_path / "rows.jsonl", rows)
    _fails(capsys, ["train", TINY, f"data.train=[{{name: {data}}}]",
                    "rewards.custom_verifiers=[my_verifiers_sig:one_arg]",
                    f"experiment.output_dir={tmp_path / 'run'}"],
           "verifier 'my_verifiers_sig:one_arg'", "cannot be called as fn(completion, "
                                                  "ground_truth)")


def test_a_constant_denominator_with_a_sequence_mean_loss_is_refused(capsys, TINY):
    for loss in ("grpo", "gspo"):
        _fails(capsys, ["config", TINY, f"algorithm.loss_fn={loss}",
                        "algorithm.loss_denominator=512"],
               f"algorithm.loss_denominator=512.0 with algorithm.loss_fn={loss}",
               "neither GRPO nor Dr.GRPO", "algorithm.loss_fn=dapo")
    assert main(["config", TINY, "algorithm.loss_fn=dapo", "algorithm.loss_denominator=512"]) == 0
    assert main(["config", TINY, "algorithm.loss_fn=grpo"]) == 0


def test_a_run_that_fails_its_checks_leaves_the_existing_run_alone(tmp_path, capsys, TINY):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("# the earlier run's config\n")
    data = _rows(tmp_path / "rows.jsonl", _addition_rows(40) + [{"prompt": "no truth"}])
    _fails(capsys, ["train", TINY, f"data.train=[{{name: {data}}}]",
                    f"experiment.output_dir={run_dir}"], f"{data} line 41")
    assert (run_dir / "config.yaml").read_text() == "# the earlier run's config\n"
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.yaml"]


@pytest.mark.parametrize("override, message", [
    ("optimizer.max_grad_norm=-1", "optimizer.max_grad_norm=-1.0 must be > 0"),
    ("algorithm.clip_lower=1.5", "algorithm.clip_lower=1.5 must be in [0, 1)"),
])
def test_nonsense_numbers_stop_train_in_one_line(tmp_path, capsys, TINY, override, message):
    _fails(capsys, ["train", TINY, override, f"experiment.output_dir={tmp_path / 'run'}"],
           message)
    assert not (tmp_path / "run").exists()


def test_a_slurm_run_with_bad_data_writes_no_job_files(tmp_path, TINY):
    from rlvr.config import load_config
    from rlvr.data.errors import DataError
    from rlvr.launch.slurm import prepare

    data = _rows(tmp_path / "rows.jsonl", _addition_rows(40) + [{"prompt": "no truth"}])
    cfg = load_config(TINY, [f"data.train=[{{name: {data}}}]", "rollout.engine=remote",
                             "distributed.launcher=slurm",
                             f"experiment.output_dir={tmp_path / 'run'}"])
    with pytest.raises(DataError, match="line 41 field 'ground_truth': missing"):
        prepare(cfg)
    assert not (tmp_path / "run").exists()


@pytest.fixture
def no_model_loads(monkeypatch):
    """Loading the policy fails the test: these cases must stop before it."""
    import rlvr.run.build

    monkeypatch.setattr(rlvr.run.build, "load_causal_lm",
                        lambda *a, **k: pytest.fail("the model loaded before the check"))


@pytest.mark.parametrize("where", ["output_dir", "a parent", "state_dir", "default state"])
def test_a_file_where_a_run_directory_goes_stops_before_the_model_loads(
        tmp_path, capsys, TINY, no_model_loads, where):
    """A file as experiment.output_dir failed at mkdir after the model loaded (FileExistsError,
    exit 1); as checkpoint.checkpoint_state_dir, at the first state save after a step trained."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    run, field = tmp_path / "run", "experiment.output_dir"
    args = {"output_dir": [f"experiment.output_dir={afile}"],
            "a parent": [f"experiment.output_dir={afile / 'run'}"],
            "state_dir": [f"experiment.output_dir={run}",
                          f"checkpoint.checkpoint_state_dir={afile}"],
            "default state": [f"experiment.output_dir={run}"]}[where]
    if where == "state_dir":
        field = "checkpoint.checkpoint_state_dir"
    if where == "default state":
        run.mkdir()
        (run / "state").write_text("x")
    _fails(capsys, ["train", TINY, *args, "checkpoint.checkpoint_state_freq=1"], field,
           "exists and is not a directory")
    assert afile.read_text() == "x" and not (run / "config.yaml").exists()


def test_a_name_longer_than_the_filesystem_allows_stops_before_the_model_loads(
        tmp_path, capsys, TINY, no_model_loads):
    long = tmp_path / ("n" * 300) / "run"  # "File name too long" at mkdir, after the model
    _fails(capsys, ["train", TINY, f"experiment.output_dir={long}"], "experiment.output_dir",
           "is 300 bytes long; this filesystem allows at most")


def _short_model(tmp_path, tiny_model_dir, positions: int) -> str:
    """A GPT-2 config of `positions` positions beside the tiny model's tokenizer: all the
    checks read before the weights (which it has none of)."""
    import shutil

    from transformers import GPT2Config

    out = tmp_path / f"gpt2pos{positions}"
    out.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (source := Path(tiny_model_dir) / name).exists():
            shutil.copy(source, out / name)
    GPT2Config(n_positions=positions, n_embd=32, n_layer=1, n_head=2, vocab_size=259,
               eos_token_id=2).save_pretrained(out)
    return str(out)


def test_a_response_past_the_models_positions_stops_before_the_model_loads(
        tmp_path, capsys, TINY, tiny_model_dir, no_model_loads):
    """GPT-2's position table has n_positions rows: a longer sequence raised IndexError during
    generation, after the run directory was written."""
    model = _short_model(tmp_path, tiny_model_dir, 128)
    _fails(capsys, ["train", TINY, f"model.name_or_path={model}", "data.max_prompt_length=100",
                    "rollout.response_length=100", f"experiment.output_dir={tmp_path / 'run'}"],
           "data.max_prompt_length=100 + rollout.response_length=100 = 200 tokens",
           "the model's 128 positions (n_positions in")
    assert not (tmp_path / "run").exists()


def test_an_eval_answer_past_the_models_positions_stops_train_and_eval(
        tmp_path, capsys, TINY, no_model_loads, monkeypatch):
    """tiny-llama places 2048 positions; an eval of 100000-token answers ran for minutes."""
    _fails(capsys, ["train", TINY, "eval.response_length=100000",
                    f"experiment.output_dir={tmp_path / 'run'}"],
           "data.max_prompt_length=128 + eval.response_length=100000 = 100128 tokens",
           "the model's 2048 positions (max_position_embeddings")
    import rlvr.run.offline_eval

    monkeypatch.setattr(rlvr.run.offline_eval, "create_engine",
                        lambda *a, **k: pytest.fail("the engine started before the check"))
    _fails(capsys, ["eval", "tiny-llama", TINY, "eval.response_length=100000"],
           "eval.response_length=100000")


def test_rlvr_eval_checks_the_eval_answers_not_the_training_episodes(
        tmp_path, TINY, tiny_model_dir, monkeypatch):
    from rlvr.run.build import build_data
    from rlvr.config import ConfigError, load_config

    model = _short_model(tmp_path, tiny_model_dir, 128)
    cfg = load_config(TINY, [f"model.name_or_path={model}", "data.max_prompt_length=100",
                             "rollout.response_length=100", "eval.response_length=16"])
    with pytest.raises(ConfigError, match="rollout.response_length=100"):
        build_data(cfg, trains=True)
    assert build_data(cfg).model_dir == model  # `rlvr eval`: 100 + 16 fit
