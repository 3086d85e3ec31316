"""The one line a person watching a sweep sees per job.

    [17/96] chunked seq_len=4096 causal=true fp32 -> 41.2 ms, 9.3 MiB, ok (ETA 1m12s)
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
    else:
        error = str(row.get("error") or "").splitlines()[0][:100] if row.get("error") else ""
        result = f"{status}{': ' + error if error else ''}"
    tail = f" (ETA {fmt_duration(eta)})" if eta is not None and total and index and index < total else ""
    return f"{head}{what} -> {result}{tail}"
