"""The back-end contract: one function plus what it supports, as data; the built-ins and plugins alike.

    fn(q, k, v, *, causal, window, key_lengths, document_ids, scale, **options) -> out

and, only when the call uses them and the declaration names them (`variants`), softcap=, alibi=, sink=, and
a window that is a pair (left, right) (selfattn/variants.py). A back end that declares `takes_masks=True`
(every built-in) gets the checked masks as one `selfattn.masks.Masks` instead: fn(q, k, v, *, masks, scale,
**options), the score transforms riding on it, so its decisions about them are made once per point.

q (batch, heads, q_len, head_dim), k and v (batch, kv_heads, seq_len, head_dim), out like q, in q's
dtype and on q's device; the masks and the scale mean what `selfattn.attention` says (docs/api.md:
bottom-right aligned positions, `scale` already a number). A function declares what it supports with
the `backend` decorator (or nothing, and gets the defaults below); the harness derives or measures the
rest and says in the row which facts were its own (`mem_model`: declared | assumed; `backend_defaulted`).
Whether a point can run is answered from this data alone, before anything is allocated
(selfattn/backends/capability.py); a back end raises `selfattn.Unsupported` only for what it finds at call
time (a kernel torch refuses for these shapes).

Pure Python: a plugin imports this without the harness loading torch.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from selfattn.fp8_formats import FORMAT_OF
from selfattn.precision_names import PRECISIONS
from selfattn.variants import VARIANT_NAMES

MASK_ARGUMENTS = ("causal", "window", "key_lengths", "document_ids")
# Functions in the field's convention (selfattn/mods/): a back end names them in `masks` to take them (on its
# Masks: takes_masks=True); not among the defaults, so a back end written before them is never handed one
MASK_FUNCTIONS = ("mask_mod", "score_mod")
LAYOUTS = ("BHSD", "BSHD")  # (batch, heads, seq, dim): the harness's; (batch, seq, heads, dim): FlashAttention's
DEVICE_TYPES = ("cpu", "cuda")
# Precisions a back end may declare; tf32 is fp32 storage, so declaring fp32 declares it too. An fp8 precision is
# computed by the back end itself from float32 storage and its FP8 options (selfattn/fp8.py's Fp8Options, which
# its `options` must include: naive's and chunked's do), so declaring one needs those options.
FP8_PRECISIONS: tuple[str, ...] = tuple(FORMAT_OF)  # the FP8 formats' precisions (selfattn/fp8_formats.py)
SCORES = ("dot", "additive")  # the score functions (Point.score); additive needs its own computation (selfattn/additive.py)
# A score computed by its own module, whichever back end was named: the row's `kernel` says that module ran
OWN_SCORE_KERNELS = {"additive": "selfattn.additive"}
ATTRIBUTE = "selfattn_backend"  # where `backend` puts the declaration on the function


@dataclass(frozen=True)
class Speed:
    """An honest hint of one call's time on one device type, measured by the plugin's author:
    `fixed_s` + FLOPs / `flops_per_s`, FLOPs counted as the harness counts them (docs/plugins.md).

    Absolute, not a share of the device's matmul peak (`efficiency`): an interpreted kernel (Triton's
    interpreter on a CPU, a Python loop) runs at its interpreter's speed whatever BLAS reaches, and pays a
    fixed cost per call that no FLOP count predicts.
    """

    flops_per_s: float  # FLOPs per second the call sustains on that device type
    fixed_s: float = 0.0  # seconds every call takes whatever its size (a launch, an interpreter's set-up)

    def __post_init__(self) -> None:
        for name, low in (("flops_per_s", "> 0"), ("fixed_s", ">= 0")):
            value = getattr(self, name)
            bad = (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                   or (value <= 0 if name == "flops_per_s" else value < 0))
            if bad:
                raise ValueError(f"speed.{name}: expected a finite number {low}, got {value!r}")

    def call_s(self, flops: float) -> float:
        """Seconds of one call of `flops` FLOPs."""
        return self.fixed_s + flops / self.flops_per_s


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Declaration:
    """What a back end supports and the facts it can state about itself; every field has a default.

    A request outside what is declared is an `unsupported` row with the reason, never run another way.
    Where a fact differs by device type (`dtypes`, `backward`), it may be a mapping device type -> value.
    """

    devices: tuple[str, ...] = DEVICE_TYPES  # device types it runs on
    # precisions (fp32 includes tf32), or device type -> precisions where they differ
    dtypes: tuple[str, ...] | Mapping[str, tuple[str, ...]] = ("fp64", "fp32", "fp16", "bf16")
    masks: tuple[str, ...] = MASK_ARGUMENTS  # the mask arguments it honours ("causal" ...), and MASK_FUNCTIONS it runs
    gqa: bool = True  # k, v with fewer heads than q (heads % kv_heads == 0)
    backward: bool | Mapping[str, bool] = True  # autograd through it (mode=fwd_bwd, scope=train), or per device type
    max_head_dim: int | None = None  # the largest head_dim it takes (None: any)
    scores: tuple[str, ...] = ("dot",)  # the score functions it computes (SCORES)
    layout: str = "BHSD"  # BSHD: given (batch, seq, heads, dim) tensors made once outside the timed calls
    # True: called as fn(q, k, v, *, masks=selfattn.masks.Masks, scale, **options) (the built-ins)
    takes_masks: bool = False
    options: type | None = None  # a frozen dataclass of `selfattn.fields.spec` fields: config `backend.<option>`
    # peak bytes of one call beyond its inputs, (point, resolved options, device type) -> int; None: assumed
    mem_model: Callable[[Any, dict, str], int] | None = None
    efficiency: float | None = None  # share of the matmul peak the time guard assumes; None: the default
    kernel_label: str | Callable[[dict], str] | None = None  # the `kernel` column; None: module.function
    # the variants of selfattn/variants.py it honours: asymmetric_window (window=(left, right)), softcap,
    # alibi, sink; none by default, so a plugin written before them is never handed one
    variants: tuple[str, ...] = ()
    # why it lacks what it does not declare, added to the unsupported row's reason: keys are precisions, variants,
    # score functions, mask arguments, "backward", "head_dim", "gqa" or a device type
    gaps: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # environment variables it needs, name -> the value it must have (None: set, to anything), on the device
    # types of `requires_env_on`: {"TRITON_INTERPRET": "1"} with requires_env_on=("cpu",) for a Triton kernel
    # that a CPU runs only in the interpreter. The harness never sets them (they must be set before the
    # libraries import): where one is missing, the listing says "cpu: no (needs ...)" and a point is unsupported
    requires_env: Mapping[str, str | None] = dataclasses.field(default_factory=dict)
    requires_env_on: tuple[str, ...] = DEVICE_TYPES
    # device type -> Speed: the time guard's prediction of a call there (instead of `efficiency`)
    speed: Mapping[str, Speed] = dataclasses.field(default_factory=dict)
    # The optional hooks, each a function (selfattn/backends/__init__.py says when the harness calls them):
    # device type -> why it cannot run there at all (a library or compiler missing), or None
    unavailable: Callable[[str], str | None] | None = None
    # (given options, device, dtype) -> every option filled in (tuned defaults); None: the Options' defaults
    resolve_options: Callable[[dict, Any, Any], dict] | None = None
    compiles: Callable[[dict], bool] | None = None  # (resolved options) -> whether its calls run compiled code
    # (q, k, v, *, masks, scale, **options) -> {row column: seconds}: one-time set-up the calls reuse, timed apart
    prepare: Callable[..., dict] | None = None
    # (q, k, v, *, masks, scale, **options) -> which kernel an automatic choice ran ("flash"), or None
    kernel_ran: Callable[..., str | None] | None = None

    def __post_init__(self) -> None:
        self._check_requirements()
        for name, allowed in (("devices", DEVICE_TYPES), ("masks", MASK_ARGUMENTS + MASK_FUNCTIONS), ("variants", VARIANT_NAMES),
                              ("scores", SCORES)):
            object.__setattr__(self, name, _names(name, getattr(self, name), allowed))
        object.__setattr__(self, "dtypes", _per_device("dtypes", self.dtypes, lambda v: _names("dtypes", v, PRECISIONS)))
        object.__setattr__(self, "backward", _per_device("backward", self.backward, _flag))
        object.__setattr__(self, "gaps", dict(self.gaps))
        if any(p in FP8_PRECISIONS for p in self.all_dtypes()) and "fp8" not in getattr(self.options, "__dataclass_fields__", {}):
            raise ValueError("dtypes: an fp8 precision needs the FP8 options (options inheriting selfattn.fp8.Fp8Options), "
                             "which this declaration's options lack")
        if self.max_head_dim is not None and (isinstance(self.max_head_dim, bool) or not isinstance(self.max_head_dim, int)
                                              or self.max_head_dim < 1):
            raise ValueError(f"max_head_dim: expected None or an integer >= 1, got {self.max_head_dim!r}")
        for hook in ("unavailable", "resolve_options", "compiles", "prepare", "kernel_ran", "mem_model"):
            if getattr(self, hook) is not None and not callable(getattr(self, hook)):
                raise ValueError(f"{hook}: expected a function or None, got {getattr(self, hook)!r}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout: expected one of {', '.join(LAYOUTS)}, got {self.layout!r}")
        if self.options is not None and not dataclasses.is_dataclass(self.options):
            raise ValueError(f"options: expected a dataclass of selfattn.fields.spec fields, got {self.options!r}")
        if self.efficiency is not None and not 0 < self.efficiency <= 1:
            raise ValueError(f"efficiency: expected a share of the peak in (0, 1], got {self.efficiency!r}")

    def _check_requirements(self) -> None:
        """requires_env, requires_env_on and speed: one-line errors naming the field; stored read-only."""
        env = self.requires_env
        if not isinstance(env, Mapping):
            raise ValueError(f"requires_env: expected a mapping of variable names to values, e.g. "
                             f"{{'TRITON_INTERPRET': '1'}}, got {env!r}")
        for name, value in env.items():
            if not isinstance(name, str) or not _ENV_NAME.match(name):
                raise ValueError(f"requires_env: expected variable names (letters, digits, _), got {name!r}")
            if value is not None and not isinstance(value, str):
                raise ValueError(f"requires_env: {name}'s value must be a string (or None: set to anything), "
                                 f"got {value!r}")
        object.__setattr__(self, "requires_env", dict(env))
        on = (self.requires_env_on,) if isinstance(self.requires_env_on, str) else tuple(self.requires_env_on)
        for value in on:
            if value not in DEVICE_TYPES:
                raise ValueError(f"requires_env_on: expected some of {', '.join(DEVICE_TYPES)}, got {value!r}")
        object.__setattr__(self, "requires_env_on", on)
        if not isinstance(self.speed, Mapping):
            raise ValueError(f"speed: expected a mapping of device types to Speed(flops_per_s=..., fixed_s=...), "
                             f"e.g. {{'cpu': Speed(flops_per_s=2e8)}}, got {self.speed!r}")
        for device, hint in self.speed.items():
            if device not in DEVICE_TYPES:
                raise ValueError(f"speed: expected device types {', '.join(DEVICE_TYPES)} as keys, got {device!r}")
            if not isinstance(hint, Speed):
                raise ValueError(f"speed: {device}'s hint must be a Speed(flops_per_s=..., fixed_s=...), got {hint!r}")
        object.__setattr__(self, "speed", dict(self.speed))

    def missing_env(self, device_type: str, environ: Mapping[str, str] | None = None) -> list[str]:
        """The required variables `environ` (this process's environment) lacks on `device_type`, as NAME=value."""
        if device_type not in self.requires_env_on:
            return []
        environ = os.environ if environ is None else environ
        return [f"{name}={'...' if value is None else value}" for name, value in self.requires_env.items()
                if (not environ.get(name, "").strip() if value is None else environ.get(name, "").strip() != value)]

    def speed_on(self, device_type: str) -> Speed | None:
        """The declared speed on `device_type`, or None (the guard then assumes `efficiency` of the peak)."""
        return self.speed.get(device_type)

    def dtypes_on(self, device_type: str) -> tuple[str, ...]:
        """The precisions it takes on `device_type` (fp32 standing for tf32 too)."""
        return self.dtypes.get(device_type, ()) if isinstance(self.dtypes, Mapping) else self.dtypes

    def all_dtypes(self) -> tuple[str, ...]:
        """Every precision it takes on some device type."""
        if not isinstance(self.dtypes, Mapping):
            return self.dtypes
        return tuple(dict.fromkeys(p for values in self.dtypes.values() for p in values))

    def allows_precision(self, precision: str, device_type: str | None = None) -> bool:
        """Whether it takes `precision` (on `device_type`; None: on some device type)."""
        declared = self.all_dtypes() if device_type is None else self.dtypes_on(device_type)
        return precision in declared or (precision == "tf32" and "fp32" in declared)

    def backward_on(self, device_type: str) -> bool:
        return bool(self.backward.get(device_type, False)) if isinstance(self.backward, dict) else bool(self.backward)


def _names(field: str, values: Any, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """A tuple of names from `allowed` (one name alone is a tuple of one); ValueError naming the field else."""
    if isinstance(values, str):
        values = (values,)
    values = tuple(values)
    for value in values:
        if value not in allowed:
            raise ValueError(f"{field}: expected some of {', '.join(allowed)}, got {value!r}")
    return values


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"backward: expected True or False, got {value!r}")
    return value


def _per_device(field: str, value: Any, check: Callable[[Any], Any]) -> Any:
    """`value` checked, or a mapping device type -> value checked per device type (a plain dict)."""
    if not isinstance(value, Mapping):
        return check(value)
    for device in value:
        if device not in DEVICE_TYPES:
            raise ValueError(f"{field}: expected device types {', '.join(DEVICE_TYPES)} as keys, got {device!r}")
    return {device: check(v) for device, v in value.items()}


def backend(fn: Callable | None = None, /, **declared: Any) -> Any:
    """Declare what `fn` supports: `@backend(devices=("cuda",), dtypes=("fp16", "bf16"), layout="BSHD")`.

    Returns `fn` itself with the `Declaration` as its `selfattn_backend` attribute (bare `@backend`:
    every default), so the function stays callable as it was.
    """
    declaration = Declaration(**declared)

    def mark(function: Callable) -> Callable:
        setattr(function, ATTRIBUTE, declaration)
        return function

    return mark(fn) if fn is not None else mark


def declaration_of(obj: Any) -> Declaration:
    """The object's declaration: the one `backend` attached, else every default."""
    found = getattr(obj, ATTRIBUTE, None)
    if found is None:
        return Declaration()
    if not isinstance(found, Declaration):
        raise ValueError(f"{ATTRIBUTE}: expected a selfattn.backends.Declaration, got {type(found).__name__}")
    return found
