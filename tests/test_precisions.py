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


def test_every_precision_has_its_config_file():
    assert {p.stem for p in (REPO / "conf" / "precision").glob("*.yaml")} == set(PRECISIONS)


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
