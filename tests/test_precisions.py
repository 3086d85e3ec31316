"""One list of precisions (selfattn.point.PRECISIONS): every table keyed by precision holds it."""

from __future__ import annotations

from pathlib import Path

from selfattn.api import PRECISION_OF
from selfattn.backends.contract import FP8_PRECISIONS
from selfattn.fp8_formats import FORMAT_OF
from selfattn.point import ELEMENT_BYTES, PRECISIONS, Point
from selfattn.precision import DTYPES

REPO = Path(__file__).resolve().parents[1]


def test_every_table_keyed_by_precision_holds_the_one_list():
    assert tuple(ELEMENT_BYTES) == PRECISIONS and tuple(DTYPES) == PRECISIONS
    assert Point.__dataclass_fields__["precision"].metadata["choices"] == PRECISIONS
    assert set(FP8_PRECISIONS) == set(FORMAT_OF) and set(FP8_PRECISIONS) <= set(PRECISIONS)
    assert set(PRECISION_OF.values()) <= set(PRECISIONS)


def test_the_config_group_is_the_list_and_no_file_restates_it():
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from runners import cli_check, config

    assert not list((REPO / "conf" / "precision").glob("*.yaml"))
    assert cli_check.group_options("precision") == tuple(sorted(PRECISIONS))
    config.register_resolvers()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            assert compose("config").precision.name == "fp32"
            for precision in PRECISIONS:
                assert compose("config", overrides=[f"precision={precision}"]).precision == {"name": precision}
    finally:
        GlobalHydra.instance().clear()


def test_every_other_table_of_precisions_names_only_the_list_s():
    """Tables that hold a fact per precision (a tolerance, a colour, a spec sheet's column) may leave a precision
    out, never name one the list lacks; the figures' order and colours hold every precision."""
    from analysis import ab, basics, positions, stability
    from analysis.figures import accuracy, style
    from selfattn.measure.spec_peaks import SPEC_DTYPE

    assert set(style.PRECISION_ORDER) == set(PRECISIONS) == set(style.PRECISION_COLORS) == set(SPEC_DTYPE)
    for table in (style.PRECISION_DASHES, stability.FINITE_MAX, basics.PERM_TOLERANCE, accuracy.UNIT_ROUNDOFF,
                  ab.EPSILON, positions.ROPE_SHIFT_TOLERANCE):
        assert set(table) <= set(PRECISIONS), sorted(set(table) - set(PRECISIONS))
