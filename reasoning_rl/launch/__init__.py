"""Launchers beyond one process: Slurm through submitit (slurm) and torchrun (torchrun)."""
