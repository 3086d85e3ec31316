"""selfattn-bench's Hydra config source for plugin back ends (backend_source.py): Hydra loads config sources from the hydra_plugins namespace only."""
