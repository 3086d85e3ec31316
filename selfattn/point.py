"""One point of a sweep: everything that decides what is measured, and nothing else.

`Point` is the one definition of the sweep axes: each field is a flat config key of
`python -m runners.sweep`, and its `spec` metadata (type, allowed values, bounds, help) drives
validation, the point's id, the progress line, wandb's config and the analysis' grouping and filters.
Adding an axis is a field here (results.csv's column and the config's key at its default derive from it:
selfattn/results.py, runners/config.py), the generated docs/usage.md, and the code that uses it
(docs/architecture.md, "adding a sweep axis").

Pure Python (no torch): the runner checks configs and the analysis groups rows with it.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

from selfattn.backends.discovery import backend_name, backend_source, check_backend, is_path
from selfattn.fields import default_of, spec, validate_instance
from selfattn.fp8_formats import fp8_format
from selfattn.precision_names import ELEMENT_BYTES, PRECISIONS
from selfattn.scopes import SCOPES, names_where
from selfattn.mods.discovery import check_name as check_mod_name, mod_name
from selfattn.variants import parse_alibi, parse_sink, parse_softcap, parse_window, variants_used, window_text

# precision -> bytes per element (tf32 is float32 storage with TF32 matmuls; fp8_* is what an FP8
# kernel reads and a KV cache holds, though this harness keeps Q, K, V in fp32 and quantizes them in the call)
FP32_BYTES = 4
FP64_BYTES = 8
# Score-sized (q_len x seq_len) matrices the softmax's backward keeps alive on CUDA beyond a CPU's three (the saved
# weights, their gradient, the scores' gradient), for the back ends that materialize (naive, sdpa's math kernel):
# on an H200 (torch 2.11, B2 H8 n4096 d64, fp32/bf16/fp16, causal and not) the allocator's snapshot at the peak
# held four where a CPU (torch 2.13, the profiler's allocation events) holds three.
CUDA_SOFTMAX_BACKWARD = 1
DEVICES = ("auto", "cpu", "cuda")
# Defaults that follow the scope (each scope's declaration, selfattn/scopes/): where a scope cannot take a field's
# own default, this value, for a config that does not give the field (runners/config.py: typed, or set by an
# experiment or a grid). Only such fields, so a point that was valid before keeps its values and its id (point_id).
SCOPE_DEFAULTS: dict[str, dict[str, Any]] = {name: dict(scope.defaults) for name, scope in SCOPES.items()
                                             if scope.defaults}
SCORES = ("dot", "additive")
POS_ENCODINGS = ("none", "sinusoidal", "learned", "rope")


def parse_scale(value: Any) -> float | None:
    """Turn the config spelling of `scale` into what `selfattn.attention` takes.

    "auto" (or None) -> None, meaning 1/sqrt(head_dim); "none" -> 1.0, the unscaled
    ablation; a number -> that number (positive and finite).
    """
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return None
    if isinstance(value, str) and value.strip().lower() == "none":
        return 1.0
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"scale: expected auto, none or a positive number, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(number) or number <= 0:
        raise ValueError(f"scale: expected auto, none or a positive finite number, got {value!r}")
    return number


def scale_label(value: Any) -> str:
    """The spelling stored in the `scale` column: "auto", "none" or the number as text."""
    scale = parse_scale(value)
    if scale is None:
        return "auto"
    if isinstance(value, str) and value.strip().lower() == "none":
        return "none"
    return repr(scale)


def _check_scale(value: Any) -> Any:
    parse_scale(value)
    return value


@dataclass(frozen=True)
class Point:
    """One measured configuration. Field names are the sweep's flat config keys.

    A field's default is the chapter's plain case (no window, dot-product scores, ...), and the analysis leaves
    rows at any other value out of the studies that do not name the axis (ABLATIONS below), unless the field says
    `plain=False`: an axis every study varies or fixes itself (the back end, n, d_k, ...; the axes of one scope,
    which the scope already separates). Leave a new axis unmarked."""

    backend: str = spec("naive", parse=check_backend, plain=False,
                        help="the attention back end: naive | sdpa | chunked | flex | triton, an installed plugin's "
                             "name, or a path module:function or file.py:function (docs/plugins.md; "
                             "`python -m selfattn.backends` lists them)")
    backend_options: Mapping[str, Any] = spec(
        default_factory=dict, plain=False, help="the back end's own options (config: backend.<option>)")
    precision: str = spec("fp32", choices=PRECISIONS, plain=False, help="storage and compute precision")
    device: str = spec("auto", choices=DEVICES, plain=False, help="auto: cuda when torch sees a GPU, else cpu")
    batch: int = spec(1, ge=1, plain=False, help="sequences per call")
    heads: int = spec(8, ge=1, plain=False, help="attention heads")
    kv_heads: int | None = spec(None, ge=1, null_means="heads",
                                help="K/V heads (grouped-query attention); null: heads; 1: multi-query")
    q_len: int | None = spec(None, ge=1, plain=False, null_means="seq_len",
                             help="queries per sequence; null: seq_len (1: one decode step)")
    seq_len: int = spec(1024, ge=1, plain=False, help="keys per sequence (n)")
    head_dim: int = spec(64, ge=1, plain=False, help="d_k, the dimension of one head")
    causal: bool = spec(False, plain=False, help="bottom-right aligned causal mask")
    window: int | tuple[int, int] | None = spec(
        None, parse=parse_window,
        help="sliding window: an integer w (query p sees keys j with p - j < w, and j - p < w unless causal) or a "
             "pair [left, right] (p - left <= j <= p + right, -1 unbounded; causal caps right at 0)")
    pad_frac: float = spec(0.0, ge=0, lt=1, help="mean fraction of each sequence's keys that are right padding (lengths from the seed)")
    documents: int | None = spec(None, ge=1, help="packed documents of seeded, unequal lengths per sequence; null: one")
    scale: Any = spec("auto", parse=_check_scale, plain=False,
                      help="auto (1/sqrt(head_dim)) | none (1.0, the unscaled ablation) | a positive number")
    mode: str = spec("fwd", choices=("fwd", "fwd_bwd"), plain=False, help="forward only, or forward and backward")
    scope: str = spec("core", choices=tuple(SCOPES), plain=False,
                      help="core (Q, K, V given) | layer (X with Q/K/V/O projections) | "
                           "generate (new_tokens tokens after a seq_len-token prompt, selfattn/decode.py) | "
                           "lstm, gru (one torch.nn.LSTM / nn.GRU layer over X, hidden size d_model: the recurrent baselines) | "
                           "train (a short training run on associative recall, selfattn/train/)")
    new_tokens: int = spec(16, ge=1, plain=False, help="scope=generate: tokens generated after the prompt (T)")
    kv_cache: bool = spec(True, plain=False, help="scope=generate: keep K and V of past tokens (true) or recompute the prefix every step")
    steps: int = spec(200, ge=1, plain=False, help="scope=train: optimizer steps (AdamW)")
    lr: float = spec(3e-3, gt=0, plain=False, help="scope=train: learning rate")
    score: str = spec("dot", choices=SCORES, help="dot (the back ends' scaled dot product) | additive (Bahdanau's "
                      "v^T tanh(W_q q + W_k k), naive and scope=core only: selfattn/additive.py)")
    pos_enc: str = spec("none", choices=POS_ENCODINGS, help="none | sinusoidal, learned (added to X: scope=layer) | "
                        "rope (q and k rotated per head: scope=core, layer) (selfattn/positions.py)")
    input_std: float = spec(1.0, gt=0, plain=False,
                            help="standard deviation of the random inputs (scope=train: of the embeddings)")
    input_outliers: float = spec(0.0, ge=0, le=1, help="scope=core: probability that an entry of Q, K, V gets an extra N(0, outlier_std^2) term")
    outlier_std: float = spec(10.0, gt=0, help="standard deviation of that extra term (input_outliers > 0)")
    softcap: float | None = spec(None, parse=parse_softcap,
                                 help="logit soft-capping: null, or a cap c > 0 (each scaled logit s becomes c*tanh(s/c))")
    alibi: bool = spec(False, parse=parse_alibi, help="ALiBi: head h of H adds -slope_h*|p - j| to its logits "
                       "(slopes 2^(-8(h+1)/H); selfattn/variants.py)")
    sink: float | None = spec(None, parse=parse_sink, help="a sink logit: null, or a number joining every softmax's "
                              "denominator with no value vector (GPT-OSS, FlashAttention 4's learnable sink)")
    seed: int = spec(0, ge=0, plain=False, help="seed of the inputs and of the sampled accuracy rows")
    # mask and score functions in flex_attention's convention (selfattn/mods/), named as back ends are
    mask: str = spec("none", parse=check_mod_name("mask"),
                     help="a mask function: a built-in (prefix_lm, dilated_sliding_window, global_sliding_window, ...; "
                          "those today's axes say, such as causal, become those axes), an entry point of selfattn.masks, "
                          "or a path module:function (`python -m selfattn.mods` lists them); parameters mask.<name>")
    mask_options: Mapping[str, Any] = spec(default_factory=dict, plain=False,
                                           help="the mask function's parameters (config: mask.<name>)")
    score_mod: str = spec("none", parse=check_mod_name("score_mod"),
                          help="a score function score_mod(score, b, h, q_idx, kv_idx): a built-in (softcap, alibi: "
                               "their axes), an entry point of selfattn.score_mods, or a path module:function; "
                               "parameters score_mod.<name>")
    score_mod_options: Mapping[str, Any] = spec(default_factory=dict, plain=False,
                                                help="the score function's parameters (config: score_mod.<name>)")

    def __post_init__(self) -> None:
        # a window pair arrives as a list (Hydra, JSON): kept as a tuple, so a Point and its Masks hash
        if isinstance(self.window, list):
            try:
                object.__setattr__(self, "window", parse_window(self.window))
            except ValueError:
                pass  # validate() names it

    @property
    def q_len_resolved(self) -> int:
        return self.seq_len if self.q_len is None else self.q_len

    @property
    def kv_heads_resolved(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def scale_value(self) -> float:
        """The factor the logits are multiplied by."""
        scale = parse_scale(self.scale)
        return 1.0 / math.sqrt(self.head_dim) if scale is None else scale

    @property
    def call_options(self) -> dict[str, Any]:
        """The back end's options a call gets: the given ones, plus an FP8 precision's format."""
        fmt = fp8_format(self.precision)
        return {**self.backend_options, **({"fp8": fmt} if fmt else {})}

    @property
    def d_model(self) -> int:
        return self.heads * self.head_dim

    # Sizes the memory models of every back end share (selfattn/backends/*.predict_mem_bytes).
    @property
    def element_bytes(self) -> int:
        if self.precision not in ELEMENT_BYTES:
            raise ValueError(f"precision: expected one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        return ELEMENT_BYTES[self.precision]

    @property
    def score_elements(self) -> int:
        """Elements of one (q_len x seq_len) tensor over every batch and head."""
        return self.batch * self.heads * self.q_len_resolved * self.seq_len

    @property
    def out_bytes(self) -> int:
        return self.batch * self.heads * self.q_len_resolved * self.head_dim * self.element_bytes

    @property
    def grad_bytes(self) -> int:
        """dq, dk and dv (dk and dv per K/V head)."""
        rows = self.heads * self.q_len_resolved + 2 * self.kv_heads_resolved * self.seq_len
        return self.batch * rows * self.head_dim * self.element_bytes

    @property
    def kv_bytes(self) -> int:
        """K and V: what a decode step reads (per K/V head, so GQA divides it)."""
        return 2 * self.batch * self.kv_heads_resolved * self.seq_len * self.head_dim * self.element_bytes

    @property
    def projection_weights(self) -> int:
        """Elements of the layer's four projections: W_Q and W_O d_model x d_model, W_K and W_V
        d_model x kv_heads*D (4 d_model^2 when kv_heads = heads)."""
        return 2 * self.d_model * self.d_model + 2 * self.d_model * self.kv_heads_resolved * self.head_dim

    @property
    def recurrent_weights(self) -> int:
        """Elements of scope=lstm/gru's one layer, hidden size d_model: W_ih and W_hh (gates x d_model
        x d_model each) and their two biases (gates x d_model each)."""
        gates = SCOPES[self.scope].gates
        return 2 * gates * self.d_model * (self.d_model + 1)

    @property
    def step_contexts(self) -> range:
        """scope=generate: each step's context length (the step at position p attends to p + 1 tokens)."""
        return range(self.seq_len + 1, self.seq_len + self.new_tokens + 1)

    @property
    def masks_per_sequence(self) -> bool:
        """Whether sequences of the batch see different keys (padding, documents): per-sequence masks."""
        return self.pad_frac > 0 or self.documents is not None

    @property
    def variants(self) -> tuple[str, ...]:
        """The attention variants this point uses (selfattn/variants.py), which its back end must declare."""
        return variants_used(self.window, self.softcap, self.alibi, self.sink)

    @property
    def masked(self) -> bool:
        """Whether any mask hides keys (what makes back ends build or skip anything)."""
        return self.causal or self.window is not None or self.masks_per_sequence or self.mask != "none"

    @property
    def functions(self) -> bool:
        """Whether a mask or score function (selfattn/mods/) takes part."""
        return self.mask != "none" or self.score_mod != "none"

    def validate(self) -> None:
        """Raise ValueError with one line naming the field and what is allowed (the first rule broken)."""
        validate_instance(self)
        for check in (_check_shape, _check_scope_axes, _check_inputs, _check_layer_masks, _check_score_transforms,
                      _check_scores_positions, _check_functions, _check_recurrent):
            check(self)

    def with_device(self, device: str) -> Point:
        return self if self.device == device else replace(self, device=device)

    def columns(self) -> dict[str, Any]:
        """The point's own columns of results.csv (canonical spellings, q_len resolved).

        Filled as far as they can be even for a point that does not validate (its row says why).
        """
        values: dict[str, Any] = {name: getattr(self, name) for name in AXES}
        # a plugin's rows carry its name (a path's attribute), and where it came from beside it
        if isinstance(self.backend, str):
            values.update(backend=backend_name(self.backend), backend_source=backend_source(self.backend),
                          backend_path=self.backend if is_path(self.backend) else "")
        values["q_len"] = self.q_len_resolved
        if isinstance(self.window, (tuple, list)):  # a pair's cell: "[left, right]", as it is typed
            values["window"] = window_text((self.window[0], self.window[1]))
        values["kv_heads"] = self.kv_heads_resolved
        for name in OPTION_FIELDS:
            try:
                values[name] = json.dumps(dict(getattr(self, name)), sort_keys=True, default=str)
            except (TypeError, ValueError):
                values[name] = str(getattr(self, name))
        try:
            values.update(scale=scale_label(self.scale), scale_value=self.scale_value, d_model=self.d_model)
        except (TypeError, ValueError):
            values["scale"] = str(self.scale)
        return values

    def point_id(self, option_defaults: Mapping[str, Any] | None = None) -> str:
        """A stable hash of everything that decides what is measured (not budget, not wandb).

        The key is every field, with q_len resolved and the scale's canonical label; a field
        added after ids began joins it only when it leaves its default, and so does a back-end
        option (`option_defaults`: the back end's Options defaults), so adding an axis or an
        option keeps the ids of earlier sweeps' rows (resume relies on it).
        """
        key = {name: getattr(self, name) for name in FIELD_NAMES
               if name in _ALWAYS_IN_ID or getattr(self, name) != axis_default(name)}
        defaults_ = option_defaults or {}
        options = {k: v for k, v in self.backend_options.items() if k not in defaults_ or v != defaults_[k]}
        # the back end's name, not its path: a plugin moved between a path and an entry point keeps its ids
        key.update(backend=backend_name(self.backend) if isinstance(self.backend, str) else self.backend,
                   backend_options=dict(sorted(options.items())), q_len=self.q_len_resolved,
                   scale=scale_label(self.scale))
        for kind in ("mask", "score_mod"):  # a function's name, not its path (as for the back end)
            if kind in key and isinstance(key[kind], str):
                key[kind] = mod_name(key[kind])
        return hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]



def _check_shape(point: Point) -> None:
    """q_len of a self-attention over X, kv_heads dividing heads, packed documents' room."""
    if SCOPES[point.scope].over_x and point.q_len is not None and point.q_len != point.seq_len:
        raise ValueError(f"q_len: scope={point.scope} is self-attention over X, so q_len must be null or seq_len, got {point.q_len!r}")
    if point.heads % point.kv_heads_resolved:
        raise ValueError(f"kv_heads: must divide heads={point.heads}, got {point.kv_heads!r}")
    if point.documents is not None:
        if point.q_len_resolved != point.seq_len:
            raise ValueError(f"documents: packed documents need q_len == seq_len, got q_len={point.q_len!r}")
        if point.documents > point.seq_len:
            raise ValueError(f"documents: at most seq_len={point.seq_len} documents fit, got {point.documents!r}")


def _check_scope_axes(point: Point) -> None:
    """The axes only generate or train read stay at their defaults elsewhere (two ids would name one
    measurement); train runs fwd_bwd; generate is causal with one query per new token and no other mask."""
    scope = SCOPES[point.scope]
    for other in SCOPES.values():
        for name in other.own_axes if other is not scope else ():
            if getattr(point, name) != axis_default(name):
                raise ValueError(f"{name}: only scope={other.name} uses it, got {getattr(point, name)!r} with scope={point.scope}")
    if scope.trains and point.mode != "fwd_bwd":
        raise ValueError(f"mode: scope={scope.name} runs forward and backward, so mode must be fwd_bwd, got {point.mode!r}")
    if scope.autoregressive:
        if not point.causal:
            raise ValueError(f"causal: scope={scope.name} is autoregressive, so causal must be true, got False")
        for name, plain in (("q_len", None), ("window", None), ("pad_frac", 0.0), ("documents", None)):
            if getattr(point, name) != plain:
                raise ValueError(f"{name}: scope={scope.name} takes the prompt length from seq_len and no mask but causal, got {getattr(point, name)!r}")


def _check_inputs(point: Point) -> None:
    """Outliers (scope=core draws Q, K, V itself) and the FP8 format (the precision's, never typed)."""
    if point.input_outliers and not SCOPES[point.scope].gives_qkv:
        raise ValueError(f"input_outliers: only scope={' or '.join(names_where('gives_qkv'))} draws Q, K, V itself, "
                         f"got {point.input_outliers!r} with scope={point.scope}")
    if not point.input_outliers and point.outlier_std != axis_default("outlier_std"):
        raise ValueError(f"outlier_std: only input_outliers > 0 uses it, got {point.outlier_std!r} without outliers")
    if isinstance(point.backend_options, Mapping) and point.backend_options.get("fp8") not in (None, "none"):
        raise ValueError(f"backend.fp8: set by precision=fp8_e4m3|fp8_e5m2, not a config key, got {point.backend_options['fp8']!r}")


def _check_layer_masks(point: Point) -> None:
    """The layer runs self-attention over X, causal or not, with no other mask."""
    if SCOPES[point.scope].over_x:
        for name, plain in (("window", None), ("pad_frac", 0.0), ("documents", None)):
            if getattr(point, name) != plain:
                raise ValueError(f"{name}: scope={point.scope} supports the causal mask only, got {getattr(point, name)!r}")


def _check_score_transforms(point: Point) -> None:
    """The score transforms are measured on the attention core, on the scaled dot product's logits."""
    for name in ("softcap", "alibi", "sink"):
        if getattr(point, name) == axis_default(name):
            continue
        if not SCOPES[point.scope].gives_qkv:
            raise ValueError(f"{name}: the score transforms are measured on the attention core, so they "
                             f"need scope={' or '.join(names_where('gives_qkv'))}, got scope={point.scope}")
        if point.score != "dot":
            raise ValueError(f"{name}: transforms the scaled dot product's logits, so it needs score=dot, "
                             f"got score={point.score}")


def _check_recurrent(point: Point) -> None:
    """No attention in a scope whose own module runs (a recurrence): an attention-only axis would name a second id
    for one measurement."""
    scope = SCOPES[point.scope]
    if scope.attention:
        return
    for name in ATTENTION_ONLY:
        value = getattr(point, name)
        plain = (value in (None, point.heads) if name == "kv_heads" else
                 value in (None, point.seq_len) if name == "q_len" else value == axis_default(name))
        if not plain:
            raise ValueError(f"{name}: scope={point.scope} is {scope.kernel} with no attention, so {name} "
                             f"must stay {axis_default(name)!r}, got {value!r}")


def _check_functions(point: Point) -> None:
    """mask and score_mod: their parameters, and where they are measured (the attention core)."""
    from selfattn.mods.discovery import resolve

    for kind in ("mask", "score_mod"):
        name, options = getattr(point, kind), getattr(point, f"{kind}_options")
        if not isinstance(options, Mapping):
            raise ValueError(f"{kind}_options: expected a mapping of parameters, got {options!r}")
        if name == "none":
            if options:
                raise ValueError(f"{kind}.{next(iter(options))}: {kind}=none takes no parameters")
            continue
        resolve(kind, name).check_options(options)
        if not SCOPES[point.scope].gives_qkv:
            raise ValueError(f"{kind}: a function is measured on the attention core, so it needs "
                             f"scope={' or '.join(names_where('gives_qkv'))}, got scope={point.scope}")
        if point.score != "dot":
            raise ValueError(f"{kind}: a function of the dot product's scores needs score=dot, got score={point.score}")
        if point.q_len_resolved > point.seq_len:
            raise ValueError(f"{kind}: positions are bottom-right aligned, so it needs q_len <= seq_len, "
                             f"got q_len={point.q_len_resolved} > seq_len={point.seq_len}")


def _check_scores_positions(point: Point) -> None:
    """score and pos_enc: which scopes each exists for (a back end that cannot run one is `unsupported`)."""
    scope = SCOPES[point.scope]
    if point.score == "additive" and not scope.gives_qkv:
        raise ValueError(f"score: additive scores are measured on the attention core, so they need "
                         f"scope={' or '.join(names_where('gives_qkv'))}, got scope={point.scope}")
    if point.score == "additive" and point.pos_enc != "none":
        raise ValueError(f"pos_enc: RoPE rotates q and k for a dot product (q·k then depends on m - n); additive scores are measured without an encoding, got {point.pos_enc}")
    if point.score == "additive" and point.scale != axis_default("scale"):
        raise ValueError(f"scale: additive scores v^T tanh(W_q q + W_k k) are not scaled, so scale must stay auto, got {point.scale!r}")
    takes = tuple(name for name, s in SCOPES.items() if point.pos_enc in s.pos_encodings)
    if point.pos_enc in ("sinusoidal", "learned") and point.pos_enc not in scope.pos_encodings:
        raise ValueError(f"pos_enc: {point.pos_enc} is added to the layer's input X, so it needs scope={' or '.join(takes)}, got scope={point.scope}")
    if point.pos_enc == "rope" and point.pos_enc not in scope.pos_encodings:
        raise ValueError(f"pos_enc: rope rotates q and k of one attention call (scope={' or '.join(takes)}), got scope={point.scope}")
    if point.pos_enc == "rope" and point.head_dim % 2:
        raise ValueError(f"pos_enc: rope rotates pairs of features, so head_dim must be even, got {point.head_dim}")


FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in fields(Point))
# The ablation axes: every field not marked plain=False. Each one's default is the chapter's plain case (no
# window, dot-product scores, no soft-cap, ...): a study that does not name the axis reads only its rows at that
# value (analysis/slices.py), so a new axis stays out of the chapter's figures without an edit in analysis/.
ABLATIONS: tuple[str, ...] = tuple(f.name for f in fields(Point) if f.metadata.get("plain", True))
# A null that stands for another field's value (kv_heads: heads, q_len: seq_len): a row's column holds that value.
NULL_MEANS: dict[str, str] = {f.name: f.metadata["null_means"] for f in fields(Point) if f.metadata.get("null_means")}
# The fields point ids have hashed since they began (a historical record, not a list to extend).
_ALWAYS_IN_ID = frozenset({"backend", "backend_options", "precision", "device", "batch", "heads", "q_len",
                           "seq_len", "head_dim", "causal", "scale", "mode", "scope", "input_std", "seed"})
# Axes only attention has: scope=lstm/gru refuses them away from their defaults (kv_heads: or = heads,
# q_len: or = seq_len). heads x head_dim still sets d_model, the recurrence's hidden size.
# (The back end's options are checked against their defaults where those are known: measure/run.py.)
ATTENTION_ONLY = ("backend", "kv_heads", "q_len", "causal", "window", "pad_frac", "documents",
                  "scale", "softcap", "alibi", "sink", "mask", "score_mod")
# The options of a config group's choice (`backend.<option>`, `mask.<param>`, `score_mod.<param>`): not flat keys.
OPTION_FIELDS = ("backend_options", "mask_options", "score_mod_options")
# The flat sweep axes: every field but those options.
AXES: tuple[str, ...] = tuple(name for name in FIELD_NAMES if name not in OPTION_FIELDS)
# Columns a row spends on its point: the fields plus what they imply (d_model, the scale's factor).
POINT_COLUMNS: tuple[str, ...] = (*FIELD_NAMES, "d_model", "scale_value")


def scope_defaults(scope: Any) -> dict[str, Any]:
    """The fields whose default follows `scope` (SCOPE_DEFAULTS), and their values; {} for any other value."""
    return dict(SCOPE_DEFAULTS.get(scope, {})) if isinstance(scope, str) else {}


def axis_default(name: str) -> Any:
    """The default of field `name` (what an older results.csv without that column measured)."""
    return default_of(next(f for f in fields(Point) if f.name == name))
