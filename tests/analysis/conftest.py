"""Synthetic results.csv files that look like the default sweep and every named experiment.

Values follow the laws the chapter states (time and memory as n^b, logit std as
scale * input_std^2 * sqrt(d_k), softmax of Gaussian logits computed for real, fp16
overflow past 65504), with knobs that break a law on purpose so a claim's verdict flips.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from selfattn.results import COLUMNS, Row

FP16_MAX = 65504.0
EPS = {"fp64": 1e-16, "fp32": 6e-8, "tf32": 5e-4, "bf16": 4e-3, "fp16": 5e-4}


@dataclass
class Laws:
    time_exponent: float = 2.0  # naive and sdpa time ~ n^b
    mem_exponent: float = 2.0  # naive memory ~ n^b
    causal_saving: float = 1.9  # chunked time(no mask) / time(causal)
    unscaled_std_grows: bool = True  # False: unscaled logit std stays ~1 (contradicts the chapter)
    noise: float = 0.02  # relative, log-normal
    time_fixed_ms: float = 0.05  # a call's fixed cost (Python, dispatch)
    mem_fixed_bytes: float = 2e6  # memory beyond the inputs that does not grow with n


class Fabricator:
    def __init__(self, device: str = "cpu", device_name: str = "Fake CPU 9000", hostname: str = "host-a",
                 speed: float = 1.0, mem_bytes: float = 64e9, laws: Laws | dict | None = None, seed: int = 0):
        self.device, self.device_name, self.hostname = device, device_name, hostname
        self.speed, self.mem_bytes = speed, mem_bytes
        self.laws = Laws(**laws) if isinstance(laws, dict) else (laws or Laws())
        self.rng = np.random.default_rng(seed)
        self.grad_rng = np.random.default_rng(seed + 1)  # its own stream: self.rng's draws stay as they were
        self.rows: list[dict] = []

    def _noise(self) -> float:
        return float(np.exp(self.rng.normal(0.0, self.laws.noise)))

    def point(self, *, backend="naive", precision="fp32", seq_len=1024, head_dim=64, heads=8, batch=1,
              causal=False, scale="auto", mode="fwd", scope="core", input_std=1.0, status="ok", seed=0,
              scale_at="logits") -> dict:
        laws = self.laws
        n, d = seq_len, head_dim
        scale_value = 1.0 / math.sqrt(d) if scale == "auto" else 1.0
        pairs = n * (n + 1) / 2 if causal else n * n
        flops = 4.0 * batch * heads * pairs * d * (3.5 if mode == "fwd_bwd" else 1.0)
        exp_t = laws.time_exponent if backend != "chunked" else 2.0
        time_ms = laws.time_fixed_ms + 2e-7 * batch * heads * d * n ** exp_t / self.speed * (1.3 if backend == "naive" else 1.0)
        if causal:
            time_ms /= {"naive": 1.0, "sdpa": 1.15, "chunked": laws.causal_saving}.get(backend, 1.0)
        time_ms *= self._noise()
        itemsize = 8 if precision == "fp64" else (2 if precision in ("fp16", "bf16") else 4)
        if backend == "naive":
            mem = laws.mem_fixed_bytes + 2.0 * batch * heads * itemsize * n ** laws.mem_exponent
        else:
            mem = laws.mem_fixed_bytes + 64.0 * batch * heads * itemsize * n * 8
        mem *= self._noise()
        options = '{"scale_at": "query"}' if scale_at == "query" else "{}"
        row = Row(status=status, backend=backend, kernel=backend, backend_options=options, precision=precision,
                  device=self.device, device_name=self.device_name, mode=mode, scope=scope, batch=batch,
                  heads=heads, q_len=n, seq_len=n, head_dim=d, d_model=heads * d, causal=causal, scale=scale,
                  scale_value=scale_value, input_std=input_std, seed=seed, device_mem_bytes=int(self.mem_bytes),
                  device_capability="9.0" if self.device == "cuda" else "", hostname=self.hostname,
                  predicted_mem_bytes=int(mem / self._noise()), flops=flops, device_peak_tflops=2.0 * self.speed,
                  timestamp="2026-11-29T09:00:00+00:00", torch_version="2.13.0")
        if status != "ok":
            row.error = "synthetic failure"
            self.rows.append(row.to_dict())
            return self.rows[-1]
        row.time_ms, row.time_ms_p20, row.time_ms_p80 = time_ms, time_ms * 0.97, time_ms * 1.04
        row.peak_mem_bytes = int(mem)
        row.peak_alloc_bytes = int(mem)
        row.perm_max_abs_diff = (1.0 + self.rng.random()) if causal else 1e-7 * self.rng.random()
        row.tflops = flops / (time_ms * 1e-3) / 1e12
        self._stability(row, n, d, scale_value, input_std, precision, backend, scale_at)
        self.rows.append(row.to_dict())
        return self.rows[-1]

    def _stability(self, row: Row, n: int, d: int, scale_value: float, input_std: float, precision: str,
                   backend: str = "naive", scale_at: str = "logits") -> None:
        grows = self.laws.unscaled_std_grows or row.scale == "auto"
        std = scale_value * input_std ** 2 * math.sqrt(d) if grows else input_std ** 2
        logits = self.rng.normal(0.0, std, size=(16, min(n, 512)))
        # fp16 overflow where the product Q K^T is formed in fp16 (naive): of std s²·√d_k unless the
        # scale went on Q first; a row with one logit past 65504 turns NaN (32 rows sampled).
        product_std = input_std ** 2 * (math.sqrt(d) if scale_at != "query" or row.scale == "none" else 1.0)
        p_row = -math.expm1(n * math.log1p(-stats.norm.sf(FP16_MAX / product_std)))
        nonfinite = self.rng.binomial(32, p_row) / 32 if precision == "fp16" and backend == "naive" else 0.0
        overflow = nonfinite > 0
        weights = np.exp(logits - logits.max(axis=1, keepdims=True))
        weights /= weights.sum(axis=1, keepdims=True)
        entropy = -(weights * np.log(np.clip(weights, 1e-300, None))).sum(axis=1) / math.log(weights.shape[1])
        row.logit_std = float(logits.std())
        row.max_weight = float(weights.max(axis=1).mean())
        row.softmax_entropy = float(entropy.mean())
        row.saturated_frac = float((weights.max(axis=1) > 0.99).mean())
        spread = float((weights * (1 - weights)).sum(axis=1).mean())
        row.grad_norm_q = scale_value * input_std * math.sqrt(d) * spread + 1e-9
        row.grad_norm_k = row.grad_norm_q * 0.9
        # dL/dlogits per row = w * (g - <w, g>), g = dL/dw = upstream . v_j (std s·sqrt(d_k)); median row
        g = self.grad_rng.normal(0.0, input_std * math.sqrt(d), size=weights.shape)
        grad_logits = weights * (g - (weights * g).sum(axis=1, keepdims=True))
        row.grad_norm_logits = float(np.median(np.linalg.norm(grad_logits, axis=1)))
        row.rel_rms_err = EPS[precision] * math.sqrt(math.log2(n)) * self._noise()
        row.max_abs_err = row.rel_rms_err * 4
        row.nonfinite_frac = nonfinite
        row.grad_nonfinite_frac = row.nonfinite_frac
        if overflow:
            row.logit_std = float("nan")

    # --- experiments, shaped like conf/experiment/*.yaml at CPU sizes ---
    def default_sweep(self) -> "Fabricator":
        for backend in ("naive", "sdpa", "chunked"):
            for n in (256, 512, 1024, 2048):
                for causal in (False, True):
                    for d in (16, 64, 256):
                        for scale in ("auto", "none"):
                            self.point(backend=backend, seq_len=n, causal=causal, head_dim=d, scale=scale)
        return self

    def quadratic_cost(self, sizes=(256, 512, 1024, 2048, 4096), repeats: int = 1) -> "Fabricator":
        """`repeats` passes (seeds), as the quick study times its cost grid twice."""
        for seed in range(repeats):
            for backend in ("naive", "sdpa", "chunked"):
                for n in sizes:
                    for causal in (False, True):
                        self.point(backend=backend, seq_len=n, causal=causal, seed=seed)
        self.point(backend="naive", seq_len=65536, status="skipped_budget")
        self.point(backend="naive", seq_len=32768, status="oom")
        return self

    def scaling_stability(self) -> "Fabricator":
        for d in (16, 64, 256, 1024):
            for scale in ("auto", "none"):
                for precision in ("fp32", "fp16", "bf16"):
                    for std in (1.0, 4.0, 16.0, 64.0):
                        self.point(seq_len=256, head_dim=d, scale=scale, precision=precision, input_std=std,
                                   mode="fwd_bwd")
                for std in (1.0, 8.0, 16.0, 32.0, 64.0):  # the scale on Q first, and a fused kernel
                    self.point(seq_len=256, head_dim=d, scale=scale, precision="fp16", input_std=std,
                               mode="fwd_bwd", scale_at="query")
                    self.point(backend="sdpa", seq_len=256, head_dim=d, scale=scale, precision="fp16",
                               input_std=std, mode="fwd_bwd")
        return self

    def heads(self) -> "Fabricator":
        for backend in ("naive", "sdpa", "chunked"):
            for h in (1, 2, 4, 8, 16):
                self.point(backend=backend, heads=h, head_dim=512 // h, seq_len=1024)
        return self

    def precision_accuracy(self) -> "Fabricator":
        for backend in ("naive", "sdpa", "chunked"):
            for precision in ("fp64", "fp32", "bf16", "fp16"):
                for n in (256, 1024, 4096):
                    self.point(backend=backend, precision=precision, seq_len=n)
        return self

    def everything(self) -> "Fabricator":
        return self.default_sweep().quadratic_cost().scaling_stability().heads().precision_accuracy()

    def frame(self, without: tuple[str, ...] = ()) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=[c for c in COLUMNS if c not in without])

    def write(self, path: Path, without: tuple[str, ...] = ()) -> Path:
        """`without`: columns left out, like a CSV written before they were added."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self.frame(without).to_csv(path, index=False)
        return path


@pytest.fixture
def fabricate():
    """fabricate(**kwargs) -> a Fabricator; call its experiment methods, then .write(path)."""
    return Fabricator


@pytest.fixture(scope="session")
def full_csv(tmp_path_factory) -> Path:
    """One CSV with every experiment on one fake CPU (shared: figures are slow-ish to draw)."""
    return Fabricator().everything().write(tmp_path_factory.mktemp("full") / "results.csv")
