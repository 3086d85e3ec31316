"""Back-end plugins written for the tests: kernels with the bugs and cheats the verdict must catch.

Path plugins (`backend=plugins_for_tests.bad_kernels:top_left_causal`), imported from the tests folder
on the sweep's PYTHONPATH (tests/measure/test_verdict_sweep.py)."""
