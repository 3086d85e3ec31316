"""Runners: Hydra configs in, rows out (results.csv, wandb). `python -m runners.sweep`."""
