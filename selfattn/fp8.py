"""FP8 attention, the way FlashAttention-3 computes it, for naive and chunked (forward).

precision=fp8_e4m3|fp8_e5m2 keeps Q, K, V in float32 storage (the reference dtype: the output
comes back in it) and quantizes inside the call:

1. `hadamard=true` (incoherent processing): Q and K are multiplied by the same random orthogonal
   matrix R = diag(signs) H_d / sqrt(d) (H_d the Sylvester Hadamard matrix, so d must be a power
   of two): (QR)(KR)^T = QK^T exactly, while an outlier coordinate is spread over all d.
2. Q, K, V are quantized with a scale per tensor (`fp8_scaling=tensor`), per block of
   `fp8_block` rows of each (batch, head) (`block`, FA3's block quantization), or not at all
   (`none`: a raw cast, which saturates or overflows as the format does). scale = amax / max,
   x8 = fp8(x / scale) (round to nearest even), and the products see x8 * scale.
3. QK^T is accumulated in fp32, softmax in fp32, then P is cast to fp8 with the static scale
   `p_scale` (FA3/FA4 use 2^8: P <= 1 would otherwise waste the top of e4m3's range and lose
   small probabilities to its subnormals) and P.V accumulated in fp32.

How the two products run is option `fp8_matmul` (selfattn/fp8_mm.py holds the products):
`dequant` multiplies the dequantized fp32 values (fp8 x fp8 products are exact in fp32, so this
is the fp32-accumulating FP8 matmul up to summation order); `scaled_mm` hands the fp8 tensors and
their scales to `torch._scaled_mm` (fp32 output), where its CUDA rules allow: head_dim and the key
counts multiples of 16, not e5m2 x e5m2, and QK^T's rowwise scales (fp8_scaling=block) with an fp32
output only on capability 9.x with CUDA >= 12.9; a product they refuse runs dequantized. `auto`
is scaled_mm on CUDA >= 8.9 and dequant elsewhere; forcing scaled_mm on a CPU (torch's CPU
_scaled_mm) is how the tests check it against the float64 emulation. The kernel label ends in
"-dequant", "-scaledmm" or, where the products differ, "-qkscaledmm-pvdequant"; a call whose shapes
send a product back to dequant adds ":dequant-shapes" (kernel_ran). Only the forward exists: a backward asked
for is an `unsupported` point (selfattn/backends/capability.py).

`diagnostics` gives a point's FP8 columns (the fp8 metric, selfattn/measure/metric_steps.py): saturated and non-finite
fractions of the quantized Q, K, V, the probability mass the P cast loses, and what a raw cast of
the logits does (the overflow study of analysis/fp8.py predicts them from the Gaussian tail).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import torch

from selfattn import fp8_mm, torch_private
# the options are declared without torch (the config and the command line's check read them); re-exported here
from selfattn.fp8_options import MATMULS as MATMULS, OFF as OFF, SCALINGS as SCALINGS
from selfattn.fp8_options import Fp8Options as Fp8Options
from selfattn.fp8_formats import FORMAT_MAX
from selfattn.fp8_mm import DTYPES, products_label

FORMAT_OF_DTYPE: dict[torch.dtype, str] = {dtype: name for name, dtype in DTYPES.items()}
HADAMARD_SEED = 20_240_711  # one fixed rotation: Q and K must share it, and reruns must too
SCALED_MM_CAPABILITY = (8, 9)  # torch._scaled_mm on CUDA: Ada (8.9) and newer


FP8_OPTION_NAMES = tuple(name for name in Fp8Options.__dataclass_fields__ if name != "fp8")
_DEFAULTS: dict[str, Any] = {name: f.default for name, f in Fp8Options.__dataclass_fields__.items()}


def resolve(options: Mapping[str, Any], dtype: torch.dtype, device: torch.device | str = "cpu") -> dict[str, Any]:
    """The FP8 options of a call, filled in: `fp8` from a float8 dtype (the precision's), the rest
    defaults. An FP8 option changed without FP8 is refused (two ids would name one measurement).
    With FP8, `fp8_matmul` is resolved for `device` (auto: scaled_mm on CUDA >= 8.9, else dequant) and
    `fp8_products` says how each product runs there before shapes are known (fp8_mm.device_products)."""
    fp8 = FORMAT_OF_DTYPE.get(dtype, options.get("fp8") or OFF)
    resolved = {name: options.get(name, default) if options.get(name) is not None else default
                for name, default in _DEFAULTS.items()}
    resolved["fp8"] = fp8
    if fp8 == OFF:
        for name in FP8_OPTION_NAMES:
            if resolved[name] != _DEFAULTS[name]:
                raise ValueError(f"backend.{name}: only fp8 precisions (fp8_e4m3, fp8_e5m2) use it, "
                                 f"got {resolved[name]!r} without fp8")
        return resolved
    resolved["fp8_matmul"] = _matmul(resolved["fp8_matmul"], torch.device(device))
    resolved["fp8_products"] = fp8_mm.device_products(resolved, torch.device(device))
    return resolved


def _matmul(asked: str, device: torch.device) -> str:
    """auto -> scaled_mm where torch._scaled_mm exists and the device can run it (CUDA >= 8.9), dequant else; an
    asked scaled_mm stays as asked (where it cannot run, `matmul_reason` says why: an unsupported point)."""
    if asked not in MATMULS:
        raise ValueError(f"backend.fp8_matmul: expected one of {', '.join(MATMULS)}, got {asked!r}")
    if asked == "auto":
        capable = torch_private.has_scaled_mm() and device.type == "cuda" and \
            torch.cuda.get_device_capability(device) >= SCALED_MM_CAPABILITY
        return "scaled_mm" if capable else "dequant"
    return asked


def matmul_reason(matmul: str, device: torch.device | str) -> str | None:
    """Why the resolved `fp8_matmul` cannot run on `device`: scaled_mm without torch._scaled_mm in this torch, or
    on a GPU older than capability 8.9; None when it can (selfattn.backends.capability asks)."""
    if matmul != "scaled_mm":
        return None
    if not torch_private.has_scaled_mm():  # torch's private FP8 product moved (selfattn/torch_private.py)
        return (f"backend.fp8_matmul=scaled_mm: torch._scaled_mm as written for torch "
                f"{torch_private.FIRST[0]}.{torch_private.FIRST[1]}-{torch_private.CHECKED[0]}."
                f"{torch_private.CHECKED[1]} is not in this torch ({torch.__version__}); fp8_matmul=dequant runs without it")
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.get_device_capability(device) < SCALED_MM_CAPABILITY:
        major, minor = torch.cuda.get_device_capability(device)
        return (f"backend.fp8_matmul=scaled_mm: torch._scaled_mm needs CUDA capability >= 8.9 "
                f"(FP8 tensor cores), this device has {major}.{minor}")
    return None


def label(options: Mapping[str, Any]) -> str:
    """The kernel label's FP8 part: "-fp8e4m3-block64-had-p256-dequant", "" without FP8."""
    if options.get("fp8", OFF) == OFF:
        return ""
    scaling = options["fp8_scaling"]
    text = f"-fp8{options['fp8']}-{scaling}" + (str(options["fp8_block"]) if scaling == "block" else "")
    return text + ("-had" if options["hadamard"] else "") + f"-p{options['p_scale']:g}-" + products_label(
        options.get("fp8_products", ("dequant", "dequant")))


def active(options: Mapping[str, Any]) -> bool:
    return options.get("fp8", OFF) != OFF


def check_call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, options: Mapping[str, Any]) -> None:
    """What an FP8 call's values refuse: a Hadamard rotation of a d that is no power of two. (Its backward, which
    is not built, is refused before the call: selfattn.backends.capability.)"""
    d = q.shape[-1]
    if options["hadamard"] and d & (d - 1):
        raise ValueError(f"backend.hadamard: the Hadamard construction needs head_dim a power of two, got {d}")


# --- the pieces, each tested against a float64 emulation (tests/backends/test_fp8.py) ---

def rotation(d: int, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """R = diag(signs) H_d / sqrt(d), orthogonal (d x d): the randomized Hadamard matrix, seeded."""
    if d < 1 or d & (d - 1):
        raise ValueError(f"backend.hadamard: the Hadamard construction needs head_dim a power of two, got {d}")
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < d:  # Sylvester: H_2m = [[H, H], [H, -H]]
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return (signs(d)[:, None] * h / math.sqrt(d)).to(device=device, dtype=dtype)


def signs(d: int) -> torch.Tensor:
    """The rotation's random signs (float64, +-1), from HADAMARD_SEED."""
    generator = torch.Generator().manual_seed(HADAMARD_SEED)
    return torch.randint(0, 2, (d,), generator=generator).to(torch.float64) * 2 - 1


def scales(x_XLD: torch.Tensor, fmt: str, scaling: str, block: int) -> torch.Tensor:
    """The fp32 scale of every row of x (..., L, D), broadcastable to x: amax / the format's max
    over the tensor (`tensor`) or over each block of `block` rows (`block`); 1 for `none`. An all-zero
    block gets 1."""
    if scaling not in SCALINGS:
        raise ValueError(f"backend.fp8_scaling: expected one of {', '.join(SCALINGS)}, got {scaling!r}")
    if scaling == "none":
        return torch.ones((1,) * x_XLD.dim(), dtype=torch.float32, device=x_XLD.device)
    x = x_XLD.detach().float().abs()
    if scaling == "tensor":
        amax = x.amax().reshape((1,) * x.dim())
    else:
        if isinstance(block, bool) or not isinstance(block, int) or block < 1:
            raise ValueError(f"backend.fp8_block: expected an integer >= 1, got {block!r}")
        length = x.shape[-2]
        pad = (-length) % block  # a ragged last block: zeros never raise an amax
        padded = torch.nn.functional.pad(x, (0, 0, 0, pad))
        amax_b = padded.reshape(*x.shape[:-2], (length + pad) // block, block, x.shape[-1]).amax(dim=(-1, -2))
        amax = amax_b.repeat_interleave(block, dim=-1)[..., :length, None]
    scale = true_div(amax, FORMAT_MAX[fmt])
    return torch.where(scale > 0, scale, torch.ones_like(scale))


def true_div(x: torch.Tensor, divisor: float) -> torch.Tensor:
    """x / divisor rounded as IEEE division, on every device. CUDA turns a division by a Python number
    into a multiplication by its reciprocal, which can round the quotient one ulp away from a CPU's
    (measured on an H200, torch 2.11: 16526 of 32768 block-quantized values differed); a divisor
    tensor on x's device keeps the true division."""
    return x / torch.full((), divisor, dtype=x.dtype, device=x.device)


def quantize(x: torch.Tensor, fmt: str, scale: torch.Tensor) -> torch.Tensor:
    """fp8(x / scale): division in fp32, then the cast (round to nearest even, e4m3 saturating)."""
    return (x.float() / scale).to(DTYPES[fmt])


def quant_dequant(x: torch.Tensor, fmt: str, scaling: str, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(the fp32 values a product sees, x8 * scale; the fp8 tensor itself)."""
    scale = scales(x, fmt, scaling, block)
    x8 = quantize(x, fmt, scale)
    return x8.float() * scale, x8


def operands(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, options: Mapping[str, Any]
             ) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    """(x8, scale) of Q, K, V (rotated first when hadamard): the fp8 tensors and their fp32 scales,
    broadcastable to them (one per tensor or per row); x8.float() * scale is what a product sees."""
    fmt, scaling, block = options["fp8"], options["fp8_scaling"], options["fp8_block"]
    q, k, v = q.float(), k.float(), v.float()
    if options["hadamard"]:
        r_DD = rotation(q.shape[-1], q.device)
        q, k = q @ r_DD, k @ r_DD
    out = []
    for t in (q, k, v):
        scale = scales(t, fmt, scaling, block)
        out.append((quantize(t, fmt, scale), scale))
    return tuple(out)


def inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, options: Mapping[str, Any]
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The dequantized fp32 Q, K, V an FP8 call multiplies (rotated first when hadamard)."""
    return tuple(x8.float() * scale for x8, scale in operands(q, k, v, options))  # type: ignore[return-value]


def p_cast(options: Mapping[str, Any]) -> Callable[[torch.Tensor], torch.Tensor]:
    """P -> fp8(P * p_scale) / p_scale in fp32: what the P.V product sees."""
    dtype, p_scale = DTYPES[options["fp8"]], float(options["p_scale"])

    def cast(p: torch.Tensor) -> torch.Tensor:
        return true_div((p * p_scale).to(dtype).float(), p_scale)

    return cast


# --- a point's FP8 columns, from its sampled rows (the fp8 metric, selfattn/measure/metric_steps.py) ---

def diagnostics(q_rows: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float,
                options: Mapping[str, Any]) -> dict[str, float]:
    """fp8_saturated_frac, fp8_nonfinite_frac: of the quantized Q (sampled rows), K, V values, the
    share at the format's largest magnitude and the share non-finite; p_mass_err: mean over rows of
    |1 - sum of the dequantized P| (the probability mass the P cast loses, or gains); the same two
    fractions for a raw cast of the logits (point's scale, no quantization scale): raw_logit_*.
    The rows' keys are all keys (the masks are left out: a diagnostic of the format, not the mask)."""
    fmt = options["fp8"]
    group = q_rows.shape[1] // k.shape[1]
    k_full, v_full = (t.repeat_interleave(group, dim=1) for t in (k, v))
    top = FORMAT_MAX[fmt]
    q32, k32, v32 = q_rows.float(), k_full.float(), v_full.float()
    if options["hadamard"]:
        r_DD = rotation(q32.shape[-1], q32.device)
        q32, k32 = q32 @ r_DD, k32 @ r_DD
    # Q's block scales come from its sampled rows only: close to, not exactly, the call's blocks
    quantized = [quant_dequant(t, fmt, options["fp8_scaling"], options["fp8_block"])[1].float() for t in (q32, k32, v32)]
    values = torch.cat([t.flatten() for t in quantized])
    qd, kd = (t8 * scales(t, fmt, options["fp8_scaling"], options["fp8_block"]) for t8, t in zip(quantized[:2], (q32, k32)))
    logits = (qd @ kd.transpose(-1, -2)) * scale
    p = torch.softmax(logits, dim=-1)
    mass = p_cast(options)(p).double().sum(dim=-1)
    raw = ((q_rows.double() @ k_full.double().transpose(-1, -2)) * scale).float().to(DTYPES[fmt]).float()
    return {
        "fp8_saturated_frac": float((values.abs() == top).double().mean()),
        "fp8_nonfinite_frac": float((~values.isfinite()).double().mean()),
        "p_mass_err": float((1 - mass).abs().mean()),
        "raw_logit_saturated_frac": float((raw.abs() == top).double().mean()),
        "raw_logit_nonfinite_frac": float((~raw.isfinite()).double().mean()),
    }


def mem_bytes(point: Any, options: Mapping[str, Any] | None = None) -> int:
    """Bytes an FP8 call allocates for its inputs beyond a plain fp32 call: Q, K, V's fp32 copies
    (and rotated ones), their fp8 tensors and the dequantized values the products read; 0 without FP8.
    With a product through _scaled_mm (resolved `options`), also V8's transposed copy and Q's row scales
    (P's fp8 cast there needs less than the dequant path's P cast, which the back ends' models hold)."""
    if not str(point.precision).startswith("fp8"):
        return 0
    q = point.batch * point.heads * point.q_len_resolved * point.head_dim
    kv = point.batch * point.kv_heads_resolved * point.seq_len * point.head_dim
    per = 4 + 1 + 4  # x / scale, x8, x8 * scale (the rotation's output replaces the copy)
    scaled_mm = "scaled_mm" in (options or {}).get("fp8_products", ())
    return (q + 2 * kv) * per + ((kv + 4 * q // point.head_dim) if scaled_mm else 0)
