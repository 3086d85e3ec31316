"""A request from the sweep's process to its isolated worker, as JSON: nothing on the channel is a pickle.

One request is one point: `{"kind": "point", "nonce", "point_id", "point": {Point's fields},
"budget": {Budget's fields}, "metrics": [names], "timing": {TimingOptions' fields}}`, framed by its length (8 bytes, network order). The worker
rebuilds Point, Budget and TimingOptions from the field mappings through the same checks a config's values pass
(selfattn.fields.check_fields: no unknown field, each value of its kind and within its rules) and the metric
names through parse_metrics; a request that fails them is refused with the one-line reason, so the worker
never builds an object from anything but checked data (runners/isolate.py's answers are checked likewise).
"""

from __future__ import annotations

import dataclasses
import json
import struct
from typing import Any, Iterable, Mapping

HEADER = struct.Struct("!Q")  # a request's length in bytes, then its JSON
MAX_REQUEST_BYTES = 16 * 2**20  # a point's fields are a few KiB: past this the length is garbage


def encode(nonce: str, point_id: str, point: Any, budget: Any, metrics: Iterable[str], timing: Any) -> bytes:
    """The framed request for `point` (a selfattn Point) under `budget`, timed as `timing` (TimingOptions) says."""
    message = {"kind": "point", "nonce": nonce, "point_id": point_id, "point": _fields(point),
               "budget": _fields(budget), "metrics": list(metrics), "timing": _fields(timing)}
    data = json.dumps(message, allow_nan=False, default=_plain).encode()
    return HEADER.pack(len(data)) + data


def _plain(value: Any) -> Any:
    """What json does not know: a mapping (a frozen options view) as an object; anything else is refused."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"a field value of type {type(value).__name__} has no JSON form")


def _fields(obj: Any) -> dict[str, Any]:
    """A dataclass's fields as JSON holds them (a tuple as a list, a mapping as an object)."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


@dataclasses.dataclass(frozen=True)
class Request:
    nonce: str
    point_id: str
    point: Any  # selfattn.point.Point
    budget: Any  # selfattn.measure.budget.Budget
    metrics: tuple[str, ...]
    timing: Any  # selfattn.measure.timing_options.TimingOptions


def identity(data: bytes) -> tuple[str, str]:
    """The nonce and point id a request names (so that even a refusal answers it); ValueError if none."""
    message = json.loads(data)
    if not isinstance(message, dict) or message.get("kind") != "point":
        raise ValueError("a request that is no point's")
    nonce, point_id = message.get("nonce"), message.get("point_id")
    if not isinstance(nonce, str) or not isinstance(point_id, str):
        raise ValueError("a request without its nonce and point id")
    return nonce, point_id


def decode(data: bytes) -> Request:
    """The request in `data` (its JSON, without the length), checked field by field; ValueError naming what
    fails (`point.seq_len: expected an integer >= 1, got -3`)."""
    from selfattn.fields import check_fields
    from selfattn.measure.budget import Budget
    from selfattn.measure.timing_options import TimingOptions
    from selfattn.metrics import parse_metrics
    from selfattn.point import Point

    nonce, point_id = identity(data)
    message = json.loads(data)
    unknown = set(message) - {"kind", "nonce", "point_id", "point", "budget", "metrics", "timing"}
    if unknown:
        raise ValueError(f"request: unknown key {sorted(unknown)[0]!r}")
    for section in ("point", "budget", "timing"):
        if not isinstance(message.get(section), dict):
            raise ValueError(f"{section}: expected a mapping of its fields")
    point = Point(**check_fields(Point, message["point"], prefix="point."))
    budget = Budget(**check_fields(Budget, message["budget"], prefix="budget."))
    timing = TimingOptions(**check_fields(TimingOptions, message["timing"], prefix="timing."))
    return Request(nonce, point_id, point, budget, parse_metrics(message.get("metrics")), timing)
