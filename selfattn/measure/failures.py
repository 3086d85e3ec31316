"""The one place where an exception becomes a row's status.

A failure's status decides how a sweep reads it: `oom` is a size limit of this device (the
figures mark it), `unsupported` a combination this device or build cannot run, `invalid` a
request that is never valid, `error` a bug to look at. Libraries report the same condition
in several ways, so the mapping lives here once instead of as substring checks in modules:

- out of memory: torch's OutOfMemoryError (the caching allocator), but also a plain
  RuntimeError when the allocation failed inside a library or the driver: cuBLAS
  ("CUBLAS_STATUS_ALLOC_FAILED"), cuDNN ("CUDNN_STATUS_ALLOC_FAILED"), a raw CUDA call
  ("CUDA error: out of memory"), the CPU allocator ("can't allocate memory"), Python's
  MemoryError;
- unsupported: `selfattn.Unsupported`; a dtype without a kernel ("not implemented for
  'Half'"); SDPA with no kernel left ("No available kernel", "No viable backend"); a forced
  cuDNN attention whose frontend finds no plan for the graph ("No execution plans ...",
  "No valid execution plans built");
- invalid: ValueError (the harness's one-line errors naming the field);
- error: anything else. Its full traceback is kept (`take_traceback`) so the runner can write
  it next to the row, where the one-line `error` column cannot hold it.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from pathlib import Path

import torch

from selfattn.errors import Unsupported

# OutOfMemoryError is torch.OutOfMemoryError since 2.5 and torch.cuda.OutOfMemoryError before.
OOM_TYPES: tuple[type[BaseException], ...] = tuple(
    kind for kind in {MemoryError, getattr(torch, "OutOfMemoryError", None), getattr(torch.cuda, "OutOfMemoryError", None)}
    if kind is not None
)
# Matched case-insensitively against the exception's text (type name included).
OOM_TEXTS = (
    "out of memory",  # CUDA out of memory. / CUDA error: out of memory / cudaErrorMemoryAllocation's text
    "cublas_status_alloc_failed",
    "cudnn_status_alloc_failed",
    "can't allocate memory",  # the CPU allocator (DefaultCPUAllocator)
    "not enough memory",  # the CPU allocator on some platforms
)
UNSUPPORTED_TEXTS = (
    "not implemented for",  # a dtype without a kernel in this build: "... not implemented for 'Half'"
    "no available kernel",  # SDPA: every kernel refused the inputs
    "no viable backend",  # SDPA under sdpa_kernel(...): the forced kernel refused them
    "no execution plans",  # cuDNN frontend: "No execution plans support the graph"
    "no valid execution plans",  # cuDNN frontend: "No valid execution plans built"
)
ERROR_FILE = "error.txt"
MAX_ERROR_CHARS = 500

_last_traceback = ""


@dataclass(frozen=True)
class Failure:
    status: str  # oom | unsupported | invalid | error
    error: str  # one line: "Type: message"


def classify(err: BaseException) -> str:
    """The row status for `err`: oom, unsupported, invalid or error."""
    text = f"{type(err).__name__}: {err}".lower()
    if isinstance(err, OOM_TYPES) or any(t in text for t in OOM_TEXTS):
        return "oom"
    if isinstance(err, Unsupported) or any(t in text for t in UNSUPPORTED_TEXTS):
        return "unsupported"
    if isinstance(err, ValueError):
        return "invalid"
    return "error"


def one_line(err: BaseException) -> str:
    """`Type: message` on one line, at most MAX_ERROR_CHARS characters (the row's `error`)."""
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}"[:MAX_ERROR_CHARS]


def describe(err: BaseException) -> Failure:
    """Status and one-line error of `err`; an `error` also keeps its full traceback for `take_traceback`."""
    global _last_traceback
    status = classify(err)
    if status == "error":
        _last_traceback = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    return Failure(status, one_line(err))


def take_traceback() -> str:
    """The full traceback of the last `error` this process described, then forgotten ("" when none)."""
    global _last_traceback
    text, _last_traceback = _last_traceback, ""
    return text


def write_traceback(job_dir: Path, text: str | None = None) -> Path | None:
    """Write the last `error`'s traceback (or `text`, one from another process) to `<job_dir>/error.txt`;
    None when there is none."""
    text = take_traceback() if text is None else text
    if not text:
        return None
    path = Path(job_dir) / ERROR_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
