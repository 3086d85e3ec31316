"""Hydra's configs for `python -m runners.sweep`, installed as the package `selfattn_conf`.

The folder stays conf/ in the repository; pyproject.toml maps the package name onto it and
ships every *.yaml below it as package data, so a regular install (wheel or sdist) carries the
experiments, back ends, precisions and launcher presets. Holds no code.
"""
