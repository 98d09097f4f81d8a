"""Stand-ins for Slurm's commands, shared by the tests that run the batch script with bash
(test_slurm_script.py, test_slurm_door.py)."""

FAKE_SRUN = """#!/bin/bash
# srun's stand-in: drops the options, runs the command with its output in --output's file.
out=/dev/null
while [[ $# -gt 0 && $1 == --* ]]; do
    [[ $1 == --output=* ]] && out=${1#--output=}
    shift
done
exec "$@" >> "$out" 2>&1
"""
