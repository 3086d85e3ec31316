"""Errors the harness tells apart.

`ValueError` (from the standard library) means the caller asked for something that is
never valid. `Unsupported` means a valid request this device, dtype or torch build cannot
run, e.g. tf32 on a CPU or a forced flash kernel on fp32; a sweep turns it into a row with
status `unsupported` instead of crashing.
"""


class Unsupported(RuntimeError):
    """A valid request that cannot run here (device, dtype, shape or torch build)."""


class BackendContractError(RuntimeError):
    """A back end broke the contract it was called under: wrong output shape, dtype or device. A row with
    status `error` names what it returned (a wrong or non-finite value is the verdict's `incorrect` row)."""
