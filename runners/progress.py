"""The one line a person watching a sweep sees per job.

    [17/96] chunked seq_len=4096 causal=true fp32 -> 41.2 ms, 9.3 MiB, ok (ETA 1m12s)
    [18/96] chunked seq_len=8192 causal=true fp32 -> 160 ms, 18.6 MiB, ok, noisy (spread 34% > 10%) (ETA 1m10s)
    [3/54] naive heads=8 scale=none seed=2 fp16 -> 21.4 ms/step, loss 2.71, accuracy 0.12, 2 non-finite steps, ok
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Mapping

from selfattn.backends import COMPILED_SUFFIX
from selfattn.metrics import ran_metrics
from selfattn.point import AXES

# The point's axes worth a `key=value` (back end first and precision last are always shown).
_SHOWN = frozenset(AXES) - {"backend", "precision"} | {"d_model"}


def describe(row: Mapping[str, Any], keys: Iterable[str]) -> str:
    """`backend key=value ... precision` for the keys this job varies ("naive+compile" with compile=true)."""
    backend = str(row.get("backend") or "?") + (COMPILED_SUFFIX if _option(row, "compile") is True else "")
    parts = [backend]
    for key in keys:
        if key.startswith("backend."):
            value = key.split(".", 1)[1]
            parts[0] = f"{backend}[{value}={_text(_option(row, value))}]"
            continue
        if key in _SHOWN:
            parts.append(f"{key}={_text(row.get(key))}")
    parts.append(str(row.get("precision") or ""))
    return " ".join(p for p in parts if p)


def _option(row: Mapping[str, Any], name: str) -> Any:
    import json

    try:
        return json.loads(row.get("backend_options") or "{}").get(name)
    except (TypeError, ValueError):
        return None


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else str(value)


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "- B"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "- ms"
    if ms >= 100:
        return f"{ms:.0f} ms"
    return f"{ms:.1f} ms" if ms >= 10 else f"{ms:.2f} ms" if ms >= 1 else f"{ms:.3g} ms"


def fmt_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def eta_s(started_unix: float | None, done: int, total: int | None, now: float | None = None) -> float | None:
    """Time left if the remaining jobs take as long, on average, as the finished ones."""
    if started_unix is None or not total or done <= 0:
        return None
    elapsed = (time.time() if now is None else now) - started_unix
    return elapsed / done * max(0, total - done)


def line(index: int | None, total: int | None, what: str, row: Mapping[str, Any], note: str = "",
         eta: float | None = None) -> str:
    """The progress line; index is 1-based, total None when unknown."""
    head = f"[{index}/{total or '?'}] " if index is not None else ""
    status = str(row.get("status"))
    if note:
        result = note
    elif status == "ok" and row.get("scope") == "train":  # a training run: its outcome, not a call's memory
        result = (f"{fmt_ms(row.get('time_ms'))}/step, loss {row.get('loss_final'):.3g}, "
                  f"accuracy {row.get('final_accuracy'):.2f}, {row.get('nonfinite_steps')} non-finite steps, ok")
    elif status == "ok":
        memory = row.get("peak_mem_bytes")
        # a row that left memory out (metrics without it) says so rather than "- B"
        off = memory is None and "memory" not in ran_metrics(row.get("metrics"))
        result = f"{fmt_ms(row.get('time_ms'))}, {'memory not measured' if off else fmt_bytes(memory)}, ok"
        if row.get("compile_s") is not None:  # a compiled back end's first call, timed apart
            first = "compiled in" if row.get("recompiled") else "first call (compiled code reused)"
            result += f", {first} {row['compile_s']:.1f} s"
        if row.get("noisy") is True:  # its timing passed a noise limit (selfattn/measure/noise.py)
            result += f", noisy ({row.get('noise') or 'busy machine'})"
    else:
        # 200: room for a plugin's import error after its name and path (a back end's reason is one line)
        error = str(row.get("error") or "").splitlines()[0][:200] if row.get("error") else ""
        result = f"{status}{': ' + error if error else ''}"
    tail = f" (ETA {fmt_duration(eta)})" if eta is not None and total and index and index < total else ""
    return f"{head}{what} -> {result}{tail}"


class Skipped:
    """Points of a resumed sweep that its folder already holds: counted, then said in one line before
    the next point measured (or at the sweep's end), not a line each.

        15 of 36 points already measured, measuring 21
    A resumed sweep meets them first (its jobs run in order, and rows were written in that order), so
    the first line's count of points left is exact; points met later (a grid grown since) get
    `3 more points already measured`, and met after points measured in this run (two grids naming one
    point) `1 point already measured`.
    """

    def __init__(self) -> None:
        self.pending: dict[str, int] = {}  # status -> points, since the last line
        self.said = 0  # points already counted in a line
        self.measured = 0  # points this process has measured

    def add(self, status: str) -> None:
        self.pending[status] = self.pending.get(status, 0) + 1

    def measuring(self) -> None:
        self.measured += 1

    def line(self, total: int | None) -> str | None:
        """The line for the points counted since the last one (None when there are none)."""
        count = sum(self.pending.values())
        if not count:
            return None
        statuses = "" if set(self.pending) == {"ok"} else (
            " (" + ", ".join(f"{n} {s}" for s, n in sorted(self.pending.items(), key=lambda kv: -kv[1])) + ")")
        if self.said:
            text = f"{count} more point{'s' if count > 1 else ''} already measured{statuses}"
        elif self.measured:  # not a resumed sweep's first points: "measuring N" would count points already done
            text = f"{count} point{'s' if count > 1 else ''} already measured{statuses}"
        elif total and count >= total:
            text = f"all {total} points already measured{statuses}, nothing to measure"
        elif total:
            text = f"{count} of {total} points already measured{statuses}, measuring {total - count}"
        else:
            text = f"{count} points already measured{statuses}"
        self.said += count
        self.pending = {}
        return text


SKIPPED = Skipped()  # this process's (a sweep's jobs run in the launching process, one after another)
