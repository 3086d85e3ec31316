"""selfattn-bench's Hydra launcher plugin (compose_once.py): Hydra loads launchers from the hydra_plugins namespace only."""
