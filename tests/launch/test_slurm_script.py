"""The Slurm batch script, built from the config alone: where servers go (nodes, ports, GPUs
per step), its sbatch header, and its logic run by bash with stand-ins for srun, scontrol and
the servers (tests/serving/fake_server.py): the trainer's exit code becomes the job's and is
written to a file, a server that dies while starting fails the job at once, and SIGTERM
(scancel) stops every step. Runs in about a second, no Slurm needed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.launch.slurm_script import (DEFAULT_FIRST_PORT, JobFiles, ServerStep, batch_script,
                                      job_layout)
from rlvr.serving.server import free_port, is_healthy
from tests.launch.slurm_fakes import FAKE_SRUN

ROOT = Path(__file__).resolve().parents[2]
FAKE_SERVER = ROOT / "tests" / "serving" / "fake_server.py"


def _cfg(*extra: str):
    return load_config(ROOT / "configs" / "tiny.yaml", [
        "rollout.engine=remote", "distributed.launcher=slurm", *extra])


def _script(cfg, slurm_dir: Path, python: str = "/venv/bin/python") -> str:
    return batch_script(cfg, job_layout(cfg), JobFiles(slurm_dir), "/models/tiny", python,
                        "/home/me/rlvr")


def _srun_lines(script: str) -> list[str]:
    """Each srun command joined onto one line (the script breaks them with backslashes)."""
    joined = script.replace("\\\n", " ")
    return [line for line in joined.splitlines() if line.lstrip().startswith("srun ")]


def test_one_cpu_node_runs_a_server_and_the_trainer_overlapping(tmp_path):
    cfg = _cfg()
    layout = job_layout(cfg)
    assert layout.servers == (ServerStep(0, 0, DEFAULT_FIRST_PORT, 0),)
    assert layout.trainer_gpus == 0
    script = _script(cfg, tmp_path / "slurm")
    assert "#SBATCH --nodes=1" in script and "#SBATCH --ntasks-per-node=1" in script
    assert "--gres" not in script and f"#SBATCH --output={tmp_path}/slurm/job.log" in script
    server, trainer = _srun_lines(script)
    assert "--overlap" in server and "--overlap" in trainer  # they share the job's CPUs
    # The server binds its node's address, never every interface.
    assert f'serve "$MODEL" "$CONFIG" --host "${{NODE_ADDRS[0]}}" --port {DEFAULT_FIRST_PORT}' \
        in server and "0.0.0.0" not in script
    assert '--output="$SLURM_DIR/server_0.log"' in server
    assert '--output="$SLURM_DIR/trainer.log"' in trainer
    assert 'rlvr.cli train "$CONFIG" rollout.weight_sync_host="${NODE_ADDRS[0]}" &' in trainer
    assert f'ADDRS+=("http://${{NODE_ADDRS[0]}}:{DEFAULT_FIRST_PORT}")' in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)  # valid bash


def test_two_gpu_nodes_spread_servers_each_with_its_own_gpus(tmp_path):
    cfg = _cfg("distributed.slurm.nodes=2", "distributed.slurm.gpus_per_node=8",
               "rollout.num_servers=3", "rollout.tensor_parallel_size=2",
               "rollout.server_port=9000", "distributed.slurm.partition=gpu",
               "distributed.slurm.sbatch_args=[--exclusive]")
    layout = job_layout(cfg)
    # Node 0 keeps one GPU for the trainer: 7 free, 8 on node 1; servers alternate.
    assert [(s.node, s.port, s.gpus) for s in layout.servers] == [(0, 9000, 2), (1, 9001, 2),
                                                                   (0, 9002, 2)]
    assert layout.trainer_gpus == 1 and layout.tasks_per_node == 3
    script = _script(cfg, tmp_path / "slurm")
    for line in ["#SBATCH --nodes=2", "#SBATCH --gres=gpu:8", "#SBATCH --ntasks-per-node=3",
                 "#SBATCH --partition=gpu", "#SBATCH --exclusive"]:
        assert line in script
    *servers, trainer = _srun_lines(script)
    for i, (line, node) in enumerate(zip(servers, [0, 1, 0])):
        assert f'--nodelist="${{NODES[{node}]}}" --job-name=rlvr-server-{i}' in line
        assert "--exact --mem=0" in line and "--gres=gpu:2" in line and "--overlap" not in line
        assert f"--port {9000 + i}" in line
    assert '--nodelist="${NODES[0]}"' in trainer and "--gres=gpu:1" in trainer
    named = _srun_lines(_script(_cfg("rollout.weight_sync_host=10.0.0.5"), tmp_path))[-1]
    assert "weight_sync_host" not in named  # the config's address is kept
    assert 'STEP_CPUS=$(( SLURM_CPUS_ON_NODE / 3 ))' in script
    assert ['ADDRS+=("http://${NODE_ADDRS[0]}:9000")', 'ADDRS+=("http://${NODE_ADDRS[1]}:9001")',
            'ADDRS+=("http://${NODE_ADDRS[0]}:9002")'] == [
        line for line in script.splitlines() if line.startswith("ADDRS+=")]
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_learner_ranks_run_as_tasks_of_one_step_on_the_first_nodes(tmp_path):
    cfg = _cfg("distributed.slurm.nodes=3", "distributed.slurm.gpus_per_node=8",
               "distributed.num_learners_per_node=[4,4]", "rollout.num_servers=4",
               "rollout.tensor_parallel_size=2")
    layout = job_layout(cfg)
    # 4 learners keep 4 GPUs on nodes 0 and 1: 4 free there, 8 on node 2; servers in turn.
    assert (layout.learner_nodes, layout.learners_per_node, layout.trainer_gpus) == (2, 4, 4)
    assert [(s.node, s.gpus) for s in layout.servers] == [(0, 2), (1, 2), (2, 2), (0, 2)]
    assert layout.tasks_per_node == 6  # node 0: 4 learner ranks + 2 servers
    script = _script(cfg, tmp_path / "slurm")
    assert "#SBATCH --ntasks-per-node=6" in script
    trainer = _srun_lines(script)[-1]
    for part in ['--nodes=2 --ntasks=8 --ntasks-per-node=4 --nodelist="$LEARNER_NODES"',
                 "--job-name=rlvr-trainer", "--kill-on-bad-exit=1", "--exact --mem=0",
                 "--gres=gpu:4", '--output="$SLURM_DIR/trainer.log" --open-mode=append',
                 "export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS",
                 '"$PYTHON" -m rlvr.cli train "$CONFIG"']:
        assert part in trainer, part
    assert 'LEARNER_NODES=$(IFS=,; echo "${NODES[*]:0:2}")' in script
    assert 'export MASTER_ADDR="${NODE_ADDRS[0]}"' in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    # CPU nodes: the job holds a task per learner rank, every step overlaps on them.
    cpu = _script(_cfg("distributed.num_learners_per_node=[2]"), tmp_path / "cpu")
    assert "#SBATCH --ntasks-per-node=2" in cpu and "--overlap" in _srun_lines(cpu)[-1]


def test_learner_layouts_slurm_cannot_run_are_refused_naming_the_fields():
    with pytest.raises(ConfigError, match="srun --ntasks-per-node"):
        _cfg("distributed.slurm.nodes=2", "distributed.num_learners_per_node=[2,1]")
    with pytest.raises(ConfigError, match="at most distributed.slurm.nodes=1"):
        _cfg("distributed.num_learners_per_node=[1,1]")
    with pytest.raises(ConfigError, match="each learner needs a GPU"):
        _cfg("distributed.slurm.gpus_per_node=2", "distributed.num_learners_per_node=[3]")
    with pytest.raises(ConfigError, match=r"rollout.num_servers=2 .*\(the learners keep one GPU "
                                          r"each\): 1 fit"):
        _cfg("distributed.slurm.gpus_per_node=4", "distributed.num_learners_per_node=[3]",
             "rollout.num_servers=2")


def test_servers_that_do_not_fit_the_gpus_are_refused_naming_the_fields():
    with pytest.raises(ConfigError, match="rollout.num_servers=4.*gpus_per_node=4"):
        _cfg("distributed.slurm.gpus_per_node=4", "rollout.num_servers=4")  # 3 fit beside it
    assert len(job_layout(_cfg("distributed.slurm.gpus_per_node=4",
                               "rollout.num_servers=3")).servers) == 3


# ---- the script's logic, run by bash with stand-ins for Slurm's commands and the servers ----

FAKE_PYTHON = f"""#!/bin/bash
# The nodes' python: `rlvr serve` is a fake server, `rlvr train` reports and exits as told.
if [[ $1 == -m && $3 == serve ]]; then
    [[ $FAKE_SERVER == crash ]] && {{ echo "fake server: crashing"; exit 1; }}
    # At the host and port it was given, as `rlvr serve` is: its health proof names them.
    while [[ $# -gt 0 ]]; do
        case $1 in --host) host=$2;; --port) port=$2;; esac
        shift
    done
    exec {sys.executable} {FAKE_SERVER} --host "$host" --port "$port"
elif [[ $1 == -m && $3 == train ]]; then
    echo "fake trainer: config $4 servers $RLVR_LLM_SERVER_ADDRS overrides ${{*:5}}"
    [[ -n $FAKE_TRAIN_SLEEP ]] && exec sleep "$FAKE_TRAIN_SLEEP"
    exit "${{FAKE_TRAIN_EXIT:-0}}"
fi
exec {sys.executable} "$@"
"""


@pytest.fixture
def fake_job(tmp_path):
    """Runs a one-node job's script under bash: (start(**env) -> Popen, files, address)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # squeue knows no steps (so stopping falls back to signalling srun): a real one might
    # know a real job of this id.
    for name, text in [("srun", FAKE_SRUN), ("python", FAKE_PYTHON),
                       ("scontrol", "#!/bin/bash\necho localhost\n"),
                       ("squeue", "#!/bin/bash\nexit 0\n"), ("scancel", "#!/bin/bash\nexit 1\n")]:
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    port = free_port()
    cfg = _cfg(f"rollout.server_port={port}", "rollout.server_startup_timeout_s=30")
    files = JobFiles(tmp_path / "slurm")
    files.dir.mkdir()
    files.script.write_text(_script(cfg, files.dir, python=str(bin_dir / "python")))
    procs = []

    def start(**env: str) -> subprocess.Popen:
        full_env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
                    "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "localhost", **env}
        procs.append(subprocess.Popen(["bash", str(files.script)], env=full_env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        return procs[-1]

    yield start, files, f"http://localhost:{port}"
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_the_trainers_exit_code_is_the_jobs_and_the_server_is_stopped(fake_job):
    start, files, address = fake_job
    job = start(FAKE_TRAIN_EXIT="3")
    out, _ = job.communicate(timeout=60)
    assert job.returncode == 3, out
    assert files.exit_code.read_text().strip() == "3"
    trainer_log = files.trainer_log.read_text()
    assert f"servers {address} overrides rollout.weight_sync_host=localhost" in trainer_log
    assert "1 inference server(s) healthy" in out and "job ended with exit code 3" in out
    assert not is_healthy(address, timeout_s=0.5)  # the server step was stopped


def test_a_server_dying_while_starting_fails_the_job_at_once(fake_job):
    start, files, _ = fake_job
    started = time.monotonic()
    job = start(FAKE_SERVER="crash")
    out, _ = job.communicate(timeout=60)
    assert job.returncode == 4 and time.monotonic() - started < 20, out
    assert "inference server 0" in out and "exited while starting" in out
    assert str(files.server_log(0)) in out and "crashing" in files.server_log(0).read_text()
    assert not files.trainer_log.exists()  # no trainer without its servers
    assert files.exit_code.read_text().strip() == "4"


def test_sigterm_from_scancel_stops_every_step_and_records_143(fake_job):
    start, files, address = fake_job
    job = start(FAKE_TRAIN_SLEEP="60")
    deadline = time.monotonic() + 60
    while not (files.trainer_log.exists() and files.trainer_log.read_text()):
        assert job.poll() is None and time.monotonic() < deadline, job.stdout.read()
        time.sleep(0.1)
    job.send_signal(signal.SIGTERM)
    out, _ = job.communicate(timeout=30)  # the trainer's sleep 60 is not waited for
    assert job.returncode == 143, out
    assert files.exit_code.read_text().strip() == "143"
    assert not is_healthy(address, timeout_s=0.5)


def test_the_script_reads_its_settings_from_variables_only(tmp_path):
    """Paths with spaces survive: every value the script uses is quoted once, at the top."""
    cfg = _cfg()
    script = batch_script(cfg, job_layout(cfg), JobFiles(tmp_path / "my runs" / "slurm"),
                          "/models/my model", "/opt/my venv/bin/python", "/home/me")
    assert textwrap.dedent(f"""\
        SLURM_DIR='{tmp_path}/my runs/slurm'
        PYTHON='/opt/my venv/bin/python'
        CONFIG='{tmp_path}/my runs/slurm/config.yaml'
        MODEL='/models/my model'""") in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_a_time_limit_yaml_turned_into_a_number_is_refused():
    """Unquoted, YAML reads 24:00:00 as 86400 (base 60), which sbatch would take as minutes."""
    with pytest.raises(ConfigError, match="distributed.slurm.time='86400' is a bare number"):
        _cfg("distributed.slurm.time=24:00:00")
    assert _cfg('distributed.slurm.time="24:00:00"').distributed.slurm.time == "24:00:00"


# ---- nothing a value holds becomes a command ------------------------------------------------

INJECTED = "x\ntouch /tmp/rlvr-injected"


@pytest.mark.parametrize("field, value, named", [
    ("job_name", INJECTED, "distributed.slurm.job_name"),
    ("job_name", "my job", "distributed.slurm.job_name"),
    ("partition", INJECTED, "distributed.slurm.partition"),
    ("partition", "gpu;id", "distributed.slurm.partition"),
    ("account", INJECTED, "distributed.slurm.account"),
    ("account", "acc\r", "distributed.slurm.account"),
    ("time", "1:00:00\ntouch /tmp/x", "distributed.slurm.time"),
    ("time", "soon", "distributed.slurm.time"),
    ("sbatch_args", ["--exclusive\ntouch /tmp/x"], "distributed.slurm.sbatch_args[0]"),
    ("sbatch_args", ["touch"], "distributed.slurm.sbatch_args[0]"),
    ("sbatch_args", ["--comment=a\u2028b"], "distributed.slurm.sbatch_args[0]"),
])
def test_every_slurm_field_is_checked_before_it_reaches_the_script(tmp_path, field, value, named):
    cfg = _cfg()
    setattr(cfg.distributed.slurm, field, value)
    with pytest.raises(ConfigError, match=re.escape(named)):
        _script(cfg, tmp_path / "slurm")


def test_the_experiment_name_as_job_name_is_checked(tmp_path):
    cfg = _cfg()
    cfg.experiment.name = INJECTED
    with pytest.raises(ConfigError, match="experiment.name=.*distributed.slurm.job_name"):
        _script(cfg, tmp_path / "slurm")
    cfg.distributed.slurm.job_name = "ok-name"  # the comment shows the name escaped (repr)
    script = _script(cfg, tmp_path / "slurm")
    assert "\ntouch /tmp/rlvr-injected" not in script


@pytest.mark.parametrize("where", ["output_dir", "workdir", "model_dir", "python"])
def test_paths_with_a_line_break_are_refused(tmp_path, where):
    cfg = _cfg()
    files = JobFiles(tmp_path / ("run\ntouch x" if where == "output_dir" else "run") / "slurm")
    args = {"model_dir": "/models/tiny", "python": "/venv/bin/python", "workdir": "/home/me"}
    if where != "output_dir":
        args[where] = f"/a\nb/{where}"
    with pytest.raises(ConfigError, match="line break"):
        batch_script(cfg, job_layout(cfg), files, args["model_dir"], args["python"],
                     args["workdir"])


def test_shell_metacharacters_in_paths_stay_data(tmp_path):
    """A path with quotes, $() and ; reaches the shell lines quoted: bash reads the value back
    unchanged and runs nothing."""
    marker = tmp_path / "ran"
    python = f"/opt/it's $(touch {marker}); `touch {marker}`/python"
    cfg = _cfg()
    script = _script(cfg, tmp_path / "slurm", python=python)
    prologue = script.split("set -o pipefail")[1].split("rm -f")[0]
    out = subprocess.run(["bash", "-c", prologue + '\nprintf %s "$PYTHON"'], text=True,
                         capture_output=True, check=True).stdout
    assert out.endswith(python) and not marker.exists()


def _health_function(script: str) -> str:
    return re.search(r"^healthy\(\) \{\n.*?^\}\n", script, re.S | re.M).group(0)


def test_the_jobs_health_wait_proves_the_key_without_sending_it(tmp_path):
    """A process holding a server's port while vLLM builds its engine used to get the run's
    key in a Bearer header and pass for the server; the job's wait now asks for the proof."""
    from tests.serving.fake_server import FakeServer
    from tests.serving.test_server_identity import KEY, Listener

    healthy = _health_function(_script(_cfg(), tmp_path / "slurm", python=sys.executable))

    def check(address: str) -> int:
        env = {**os.environ, "RLVR_SERVER_KEY": KEY, "PYTHONPATH": str(ROOT / "src")}
        return subprocess.run(["bash", "-c", f'PYTHON={sys.executable}\n{healthy}healthy "$1"',
                               "-", address], env=env, timeout=60).returncode

    with Listener() as squatter:  # answers 200 to anything, knows no key
        assert check(squatter.address) != 0
        assert squatter.received and not squatter.saw(KEY)
    server = FakeServer(key=KEY).start()
    try:
        assert check(server.address) == 0
    finally:
        server.stop()
