"""Configs: every experiment composes, sweeps what it says, and builds valid points."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from runners import config
from runners.callbacks import count_jobs, jobs_sharing_device
from selfattn.point import Point

CONF = Path(__file__).resolve().parents[2] / "conf"
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
STUDIES = [name for name in EXPERIMENTS if name != "smoke"]  # smoke is one point, not a sweep
config.register_resolvers()


def task_dict(cfg):
    """The job's own config (what the task function gets), resolved, as a dict."""
    return OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]), resolve=True)


def test_the_issue_lists_every_experiment():
    assert set(EXPERIMENTS) == {"quick", "quadratic_cost", "scaling_stability", "causal_mask", "heads",
                                "precision_accuracy", "cross_gpu", "masks", "gqa", "decode", "compiled", "rnn_vs_attention",
                                "training", "additive", "positions", "fp8", "triton", "variants", "smoke", "mask_functions"}


@pytest.mark.parametrize("name", STUDIES)
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_experiment_composes_and_its_first_and_last_points_are_valid(composer, name, device):
    text = (CONF / "experiment" / f"{name}.yaml").read_text()
    assert text.startswith("# @package _global_") and "2-core CPU" in text and "H200" in text
    cfg = composer([f"experiment={name}", f"device={device}"])
    assert cfg.name == name and cfg.hydra.mode.name == "MULTIRUN"
    params = OmegaConf.to_container(cfg.hydra.sweeper.params, resolve=True)
    assert params, "an experiment sweeps something"
    total = count_jobs(cfg)
    assert 8 <= total <= 240, total  # small enough to finish in minutes on its device family
    # the first and the last job of the product, composed the way Hydra composes them
    firsts = [f"{k}={str(v).split(',')[0]}" for k, v in params.items()]
    lasts = [f"{k}={str(v).split(',')[-1]}" for k, v in params.items()]
    if "grid_point" in params:  # the union of grids: range(0,N)
        firsts, lasts = ["grid_point=0"], [f"grid_point={total - 1}"]
    for overrides in (firsts, lasts):
        job = composer([f"experiment={name}", f"device={device}", *overrides])
        flat = task_dict(job)
        if device == "cuda":  # building the point resolves devices only; cuda need not exist here
            flat["device"] = "cuda"
        try:
            point = point_of(flat)
        except ValueError as exc:
            assert name == "heads" and "does not divide" in str(exc)  # the one intended invalid
            continue
        assert isinstance(point, Point) and point.device == device


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_smoke_is_one_valid_tiny_point_measured_with_the_least_effort(composer, device):
    text = (CONF / "experiment" / "smoke.yaml").read_text()
    assert text.startswith("# @package _global_") and "2-core CPU" in text and "H200" in text
    cfg = composer(["experiment=smoke", f"device={device}"])
    assert cfg.name == "smoke" and cfg.hydra.mode is None  # a single run unless -m is given
    flat = task_dict(cfg)
    if device == "cuda":
        flat["device"] = "cuda"
    point = point_of(flat)
    assert point.device == device and point.seq_len * point.heads * point.head_dim <= 64 * 8
    assert flat["budget"] == {**flat["budget"], "timing_s": 0.01, "accuracy_rows": 4, "measure_device_peak": False}
    assert flat["report"] is False and flat["wandb"]["mode"] == "disabled"


def test_sizes_adapt_to_the_device(composer):
    cpu = composer(["experiment=quadratic_cost", "device=cpu"]).hydra.sweeper.params.seq_len
    gpu = composer(["experiment=quadratic_cost", "device=cuda"]).hydra.sweeper.params.seq_len
    assert max(map(int, cpu.split(","))) <= 4096
    assert max(map(int, gpu.split(","))) >= 131072  # chunked to 128K on a GPU (naive: budget skips)


def test_quick_is_the_union_of_its_grids(composer):
    cfg = composer(["experiment=quick", "device=cpu"])
    points = config.grid_points(cfg.grids)
    cost, stability_grid = 3 * 2 * 9, 4 * 2  # one pass: back ends x masks x sizes; head_dim x scale
    overflow, scale_on_q, heads, layer = 2 * 2 * 2 * 5, 2 * 5, 3 * 4, 2 * 2 * 5
    recurrence = 2 * 3 + 3 + 2 + 1  # lstm, gru x three sizes, the layer at the same; the FLOP/s points at d_model 512
    additive, rope, encodings = 2 + 2, 2, 3  # additive and sdpa x d_k; RoPE x two passes; three encodings
    before = cost + stability_grid + overflow + scale_on_q + heads + layer + recurrence
    assert count_jobs(cfg) == len(points) == before + additive + rope + encodings + cost  # + the cost grid's 2nd pass
    flat = task_dict(cfg)
    built = {point_of({**flat, "grid_point": i}).point_id() for i in range(len(points))}
    assert len(built) == len(points)  # no grid repeats another's point
    stability = point_of({**flat, "grid_point": cost + stability_grid - 1})
    assert (stability.backend, stability.head_dim, stability.scale) == ("naive", 1024, "none")
    on_q = point_of({**flat, "grid_point": cost + stability_grid + overflow})
    assert (on_q.backend, dict(on_q.backend_options)["scale_at"], on_q.precision, on_q.scale) == (
        "naive", "query", "fp16", "auto")
    layer_point = point_of({**flat, "grid_point": before - recurrence - 1})
    assert (layer_point.backend, layer_point.scope, layer_point.batch, layer_point.seed) == ("sdpa", "layer", 4, 1)
    rnn, last = (point_of({**flat, "grid_point": i}) for i in (before - recurrence, before - 1))
    assert (rnn.scope, rnn.backend, rnn.d_model, last.scope, last.backend, last.d_model) == (
        "lstm", "naive", 128, "layer", "sdpa", 512)
    assert points[before - 1]["metrics"] == [] and points[before - recurrence]["metrics"] == ["path_length"]
    # the additive and RoPE points have their dot-product / no-encoding twins in the other grids
    def key(p):  # the point, the back end's options aside (naive's at their defaults everywhere here)
        return tuple(v for k, v in p.columns().items() if k != "backend_options")

    built_points = [point_of({**flat, "grid_point": i}) for i in range(len(points))]
    keys = {key(p) for p in built_points}
    first_pass, second_pass = built_points[:cost], built_points[-cost:]  # the cost grid's passes: first and last
    assert {p.seed for p in first_pass} == {0} and {p.seed for p in second_pass} == {1}
    assert [replace(p, seed=1) for p in first_pass] == second_pass  # the same points, in the same scattered order
    assert {tuple(p["metrics"]) for p in points[:cost]} == {("memory", "accuracy", "permutation")}
    assert {tuple(p["metrics"]) for p in points[-cost:]} == {()}  # the second pass: time only
    for p in built_points[before:]:
        if p.score == "additive":
            assert key(replace(p, score="dot")) in keys and key(replace(p, score="dot", backend="sdpa")) in keys
        if p.pos_enc == "rope" and p.scope == "core":
            assert key(replace(p, pos_enc="none")) in keys


def test_help_lists_groups_and_experiments():
    assert "override hydra/help: selfattn" in (CONF / "config.yaml").read_text()
    text = (CONF / "hydra" / "help" / "selfattn.yaml").read_text()
    for name in EXPERIMENTS:
        assert f"  {name} " in text
    assert "$APP_CONFIG_GROUPS" in text


def point_of(cfg):
    """The job's Point, or the ValueError a single run would print."""
    parsed = config.parse_job(cfg)
    if parsed.problem:
        raise ValueError(parsed.problem)
    return parsed.point


def point_id(point):
    return point.point_id()


BASE = {"backend": {"name": "naive", "upcast_softmax": False}, "precision": {"name": "fp32"}, "device": "cpu",
        "batch": 1, "heads": 8, "seq_len": 64, "q_len": None, "head_dim": 16, "d_model": None, "causal": False,
        "scale": "auto", "mode": "fwd", "scope": "core", "input_std": 1.0, "seed": 0,
        "budget": {"timing_s": 0.1}, "grids": None, "grid_point": None}


@pytest.mark.parametrize("change, key, allowed", [
    ({"seq_len": 0}, "seq_len:", "integer >= 1"),
    ({"seq_len": "abc"}, "seq_len:", "integer >= 1"),
    ({"precision": {"name": "fp8"}}, "precision:", "fp32"),
    ({"backend": {"name": "flash"}}, "backend:", "naive, sdpa, chunked"),
    ({"backend": {"name": "sdpa", "kernel": "fast"}}, "backend.kernel:", "flash"),
    ({"backend": {"name": "chunked", "q_chunk": 0, "kv_chunk": None}}, "backend.q_chunk:", "integer >= 1"),
    ({"backend": {"name": "naive", "kernel": "math"}}, "backend.kernel:", "unknown key; allowed: backend.fp8, backend.fp8_scaling"),
    ({"scale": "big"}, "scale:", "auto, none"),
    ({"device": "tpu"}, "device:", "auto, cpu, cuda"),
    ({"causal": "yes"}, "causal:", "true or false"),
    ({"d_model": 100, "heads": 3}, "heads:", "does not divide d_model=100"),
])
def test_bad_values_raise_one_line_naming_the_key(change, key, allowed):
    with pytest.raises(ValueError) as info:
        point_of({**BASE, **change})
    message = str(info.value)
    assert "\n" not in message and message.startswith(key) and allowed in message


@pytest.mark.parametrize("budget, key", [({"timing_s": -1}, "budget.timing_s"), ({"mem_fraction": 2.0}, "budget.mem_fraction"),
                                         ({"timing": 1}, "budget.timing")])
def test_bad_budget_raises_one_line(budget, key):
    with pytest.raises(ValueError, match=rf"^{key}"):
        point_of({**BASE, "budget": budget})


@pytest.mark.parametrize("change, message", [
    ({"seqlen": 4096}, "seqlen: unknown key; did you mean seq_len?"),
    ({"kernel": "flash"}, "kernel: unknown key; did you mean backend.kernel?"),
    ({"q_chunk": 64}, "q_chunk: unknown key; did you mean backend.q_chunk?"),
    ({"budget": {"timng_s": 1.0}}, "budget.timng_s: unknown key; did you mean budget.timing_s?"),
    ({"backend": {"name": "sdpa", "kernl": "flash"}}, "backend.kernl: unknown key; did you mean backend.kernel?"),
    ({"precision": {"name": "fp16", "upcast": True}}, "precision.upcast: unknown key; allowed: precision.name"),
])
def test_unknown_keys_are_refused_naming_the_nearest_known_key(change, message):
    parsed = config.parse_job({**BASE, **change})
    assert parsed.point is None and parsed.problem == message


def test_two_bad_configs_never_share_an_id():
    """A multirun over a typo (`-m +seqlen=4096,8`) records two invalid rows, not one skipped."""
    ids = {config.parse_job({**BASE, "seqlen": n}).point_id for n in (4096, 8)}
    assert len(ids) == 2 and all(i.startswith("raw-") for i in ids)


@pytest.mark.parametrize("change, column, kept", [
    ({"seq_len": 0}, "seq_len", 0),
    ({"seq_len": "abc"}, "seq_len", "abc"),  # a number column holds the text as typed
    ({"heads": 2.5}, "heads", 2.5),
    ({"causal": "maybe"}, "causal", "maybe"),
    ({"input_std": -1.0}, "input_std", -1.0),
    ({"heads": [1, 2]}, "heads", "[1, 2]"),  # no cell holds a list: its JSON text
    ({"d_model": "big"}, "d_model", "big"),
    ({"precision": {"name": "fp8"}}, "precision", "fp8"),
])
def test_a_refused_point_keeps_every_value_as_typed(change, column, kept):
    parsed = config.parse_job({**BASE, **change})
    assert parsed.point is None and parsed.problem and parsed.point_id.startswith("raw-")
    columns = parsed.columns
    assert columns[column] == kept and type(columns[column]) is type(kept)
    assert columns["backend"] == "naive" and columns["head_dim"] == 16  # the other values too


def test_a_valid_point_keeps_its_columns_and_id():
    parsed = config.parse_job(BASE)
    assert parsed.point is not None and parsed.columns == parsed.point.columns()
    assert parsed.point_id == "0b841a20354aadae"  # the id this point had before refused rows kept their values
    assert parsed.typed_columns["seq_len"] == 64 and parsed.typed_columns["causal"] is False


def test_conf_mirrors_the_dataclasses_that_own_each_key():
    """conf/config.yaml holds exactly the runner's keys the code reads, with its defaults; the point's axes and the
    groups `backend` and `precision` are not written there at all (Hydra's ConfigStore holds them, from the code)."""
    from selfattn.fields import defaults

    conf = OmegaConf.to_container(OmegaConf.load(CONF / "config.yaml"))
    assert config.POINT_NODE in conf.pop("defaults")
    conf.pop("hydra")
    for section, owner in config.SECTIONS.items():  # budget, timing, wandb
        assert conf.pop(section) == defaults(owner), section
    assert conf == defaults(config.RunnerConf)
    assert not (CONF / "backend").exists() and not (CONF / "precision").exists()


def test_the_composed_backend_group_is_each_builtins_options_at_their_defaults(composer):
    """`backend=NAME` composes to the name and every config key of the back end's own `Options` (the one its
    module declares and the registry reads) at its default, in its order; a derived value (FP8's format) is no key."""
    from selfattn.backends import BACKEND_NAMES, get_backend
    from selfattn.fields import config_fields, default_of

    assert composer([]).backend.name == "naive"  # conf/config.yaml's default
    for name in BACKEND_NAMES:
        node = OmegaConf.to_container(composer([f"backend={name}"]).backend)
        kept = config_fields(get_backend(name).options_type)
        assert node == {"name": name, **{f.name: default_of(f) for f in kept}}, name
        assert list(node) == ["name", *(f.name for f in kept)], name
    assert "fp8" not in composer(["backend=naive"]).backend
    assert composer(["backend=chunked", "backend.q_chunk=16"]).backend.q_chunk == 16
    with pytest.raises(Exception, match="no_such_option"):  # the group is closed, as a file's was
        composer(["backend=flex", "backend.no_such_option=1"])


def test_the_composed_config_holds_every_axis_at_point_s_default(composer):
    """conf/config.yaml's `point` is every flat axis at Point's default, generated (no YAML restates them);
    an experiment and the command line still override them, and a typo is still refused."""
    from selfattn.point import AXES, axis_default

    cfg = composer([])
    for axis in AXES:
        if axis not in config.NODES:
            assert cfg[axis] == axis_default(axis), axis
    assert set(config.point_defaults()) == {a for a in AXES if a not in config.NODES}
    assert composer(["seq_len=64", "causal=true"]).seq_len == 64
    assert composer(["experiment=quick"]).name == "quick"


def test_d_model_derives_head_dim_and_q_len_defaults_to_seq_len():
    point = point_of({**BASE, "d_model": 96, "heads": 3})
    assert point.head_dim == 32 and point.q_len_resolved == 64


def test_point_id_is_stable_and_sees_every_axis_and_option():
    base = point_id(point_of(BASE))
    assert base == point_id(point_of(dict(BASE)))
    assert base == point_id(point_of({**BASE, "q_len": 64}))  # null means seq_len
    assert base == point_id(point_of({**BASE, "budget": {"timing_s": 5.0}}))  # budget is not the point
    changed = [{"seq_len": 32}, {"causal": True}, {"scale": "none"}, {"precision": {"name": "bf16"}},
               {"backend": {"name": "naive", "upcast_softmax": True}}, {"seed": 1}, {"mode": "fwd_bwd"}]
    ids = {point_id(point_of({**BASE, **c})) for c in changed}
    assert base not in ids and len(ids) == len(changed)
    chunked = {**BASE, "backend": {"name": "chunked", "q_chunk": None, "kv_chunk": None}}
    assert point_id(point_of(chunked)) != point_id(
        point_of({**chunked, "backend": {"name": "chunked", "q_chunk": 32, "kv_chunk": None}}))


def test_jobs_sharing_device_per_launcher():
    assert jobs_sharing_device({"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}, 10) == 1
    joblib = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"
    assert jobs_sharing_device({"_target_": joblib, "n_jobs": 2}, 10) == 2
    assert jobs_sharing_device({"_target_": joblib, "n_jobs": 4}, 3) == 3  # never more than the jobs
    local = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher"
    assert jobs_sharing_device({"_target_": local, "array_parallelism": 256}, 5) == 5
    slurm = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert jobs_sharing_device({"_target_": slurm}, 5) == 1


def test_a_builtin_mask_that_an_axis_says_is_that_axis_point():
    base = {**BASE}
    causal = config.parse_job({**base, "causal": True})
    by_mask = config.parse_job({**base, "mask": {"name": "causal"}})
    assert not by_mask.problem and by_mask.point_id == causal.point_id and by_mask.point.causal
    window = config.parse_job({**base, "mask": {"name": "sliding_window", "window": 8}})
    assert window.point.window == 8 and window.point.mask == "none"
    assert window.point_id == config.parse_job({**base, "window": 8}).point_id
    soft = config.parse_job({**base, "score_mod": {"name": "softcap", "cap": 5}})
    assert soft.point.softcap == 5.0
    conflict = config.parse_job({**base, "window": 4, "mask": {"name": "sliding_window", "window": 8}})
    assert conflict.problem == "window: mask=sliding_window sets window=8, and window=4 was given too"
    prefix = config.parse_job({**base, "mask": {"name": "prefix_lm", "prefix": 8}})
    assert prefix.point.mask == "prefix_lm" and prefix.columns["mask_options"] == '{"prefix": 8}'
    assert prefix.point_id != config.parse_job(base).point_id
    assert config.parse_job({**base, "mask": {"name": "prefix_lm", "prefx": 8}}).problem == (
        "mask.prefx: unknown key; did you mean mask.prefix?")
    assert config.parse_job({**base, "scope": "layer", "mask": {"name": "prefix_lm"}}).problem.startswith(
        "mask: a function is measured on the attention core")
