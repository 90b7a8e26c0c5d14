"""`python -m evalkit.cli`: what each Slurm job runs."""

from evalkit.cli import run

run()
