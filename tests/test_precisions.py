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
