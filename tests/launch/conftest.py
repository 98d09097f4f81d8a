"""The local Slurm cluster fixture (`local_slurm`) lives in tests/conftest.py: the launcher's
tests and the composition matrix share one cluster per session."""
