"""The command line's keys and names, checked before Hydra composes anything (runners/cli_check.py)."""

from __future__ import annotations

import pytest

from runners import cli_check


@pytest.mark.parametrize("overrides, message", [
    (["seqlen=512"], "seqlen: unknown key; did you mean seq_len?"),
    (["+seqlen=512"], "seqlen: unknown key; did you mean seq_len?"),
    (["budget.timing=0.1"], "budget.timing: unknown key; did you mean budget.timing_s?"),
    (["+kernel=flash"], "kernel: unknown key; did you mean backend.kernel?"),
    (["precision=float16"], "precision: expected one of bf16, fp16, fp32, fp64, fp8_e4m3, fp8_e5m2, tf32, "
                            "got 'float16'; did you mean fp16?"),
    (["backend=chunkd"], "backend: expected one of naive, sdpa, chunked, flex, triton or a path module:function (a plugin, "
                         "docs/plugins.md), got 'chunkd'; did you mean chunked?"),
    (["experiment=quik"], "experiment: expected one of additive, causal_mask, compiled, cross_gpu, decode, fp8, gqa, "
                          "heads, mask_functions, masks, positions, precision_accuracy, quadratic_cost, quick, rnn_vs_attention, "
                          "scaling_stability, smoke, training, triton, variants, got 'quik'; did you mean quick?"),
    (["backend=naive", "backend.q_chunk=64"], "backend.q_chunk: not an option of naive; chunked has it"),
])
def test_a_typo_is_one_line_naming_the_key_and_the_nearest_name(overrides, message):
    assert cli_check.problems(overrides) == [message]


def test_every_bad_value_of_every_sweep_is_listed():
    found = cli_check.problems(["backend=naive,chunkd,fleks", "precision=choice(fp16,fp61)", "experiment=range(1,2)",
                                "seq_len=16,32", "seqlen=1,2"])
    assert [p.split(":")[0] for p in found] == ["backend", "backend", "precision", "experiment", "seqlen"]
    assert "'chunkd'" in found[0] and "'fleks'" in found[1] and "'fp61'" in found[2] and "got '1'" in found[3]


@pytest.mark.parametrize("overrides", [
    ["-m"], ["backend=naive,sdpa,chunked,flex", "seq_len=16,32", "causal=true,false"],
    ["experiment=quick"], ["experiment=smoke", "budget.timing_s=0.1", "wandb.mode=disabled", "metrics=[]"],
    ["backend=chunked", "backend.q_chunk=64"], ["backend=naive,chunked", "+backend.q_chunk=64"],
    ["experiment=quick", "backend.q_chunk=256"],  # the experiment's grids pick chunked
    ["backend=sdpa,my_pkg.attn:fast", "seq_len=64,128"],  # a path in a sweep (Hydra escapes its ':' there)
    ["backend=choice(naive,my_pkg.attn:fast)"],
    ["hydra/launcher=basic", "hydra.sweep.dir=x", "++hydra.job.chdir=false", "experiment=null"],
    ["seq_len=0,abc"],  # values only a point can judge: invalid rows, not a refused sweep
    ["grids.cost.seed=[3]", "grid_point=0", "verbose=true", "~causal"],
])
def test_what_the_config_reads_passes(overrides):
    assert cli_check.problems(overrides) == []


def test_an_installed_back_end_is_a_name(monkeypatch):
    from selfattn.backends import discovery

    monkeypatch.setattr(discovery, "_entry_points", lambda: (
        discovery.EntryPoint(name="fp32acc", target="selfattn_fp32acc:attention", package="selfattn-fp32acc"),))
    assert cli_check.problems(["backend=fp32acc"]) == []
    assert cli_check.problems(["backend=fp32ac"])[0].startswith("backend: expected one of")
    assert "did you mean fp32acc?" in cli_check.problems(["backend=fp32ac"])[0]


def test_an_experiments_grids_are_checked():
    grids = [{"backend": ["naive", "chunkd"], "seq_len": [16]}, {"precision": ["fp61"], "seqlen": [1]},
             {"backend": [{"name": "naive", "scale_att": "query"}]}]
    found = cli_check.grid_problems(grids)
    assert [p.split(":")[0] for p in found] == ["backend", "precision", "seqlen", "backend.scale_att"]
    for name in cli_check.group_options("experiment"):  # every shipped experiment passes
        assert cli_check.grid_problems(cli_check.experiment_grids(name)) == [], name


def test_hydra_flags_and_other_configs_are_left_to_hydra():
    assert cli_check.overrides_of(["--help"]) is None
    assert cli_check.overrides_of(["--config-name", "other", "seqlen=1"]) is None
    assert cli_check.overrides_of(["-m", "--cfg", "job", "seq_len=1"]) == ["seq_len=1"]
    # a syntax error: one line naming the key and the grammar's forms (runners/cli_syntax.py), not Hydra's lexer
    assert cli_check.problems(["seq_len=[1,"]) == [
        "seq_len: '[1,' is not a value the override grammar reads (no viable alternative at input '[1,'); a value "
        "is a number, a word, a quoted string, a list [a,b], a dict {k:v}, or a sweep a,b | range(a,b) | choice(a,b)"]


def test_a_users_experiment_on_hydras_search_path_is_a_name(tmp_path, monkeypatch):
    mine = tmp_path / "my_conf" / "experiment"
    mine.mkdir(parents=True)
    (mine / "mine.yaml").write_text("# @package _global_\nname: mine\ngrids:\n  a: {backend: [naive, sdpx]}\n")
    monkeypatch.chdir(tmp_path)
    found = cli_check.problems(["experiment=mine", "hydra.searchpath=[file://my_conf]"])
    assert len(found) == 1 and found[0].startswith("backend: expected one of") and "'sdpx'; did you mean sdpa?" in found[0]
    assert cli_check.problems(["experiment=mine"])[0].startswith("experiment: expected one of")  # not on the path
    assert cli_check.problems(["experiment=mine"], config_dir="my_conf") == found
    assert cli_check.problems(["experiment=theirs", "hydra.searchpath=[pkg://their_pkg.conf]"]) == []  # Hydra judges


def test_a_plugin_path_in_a_sweep_is_its_value_not_hydras_escaped_spelling():
    # Hydra's string form of a sweep escapes `:` (my_attn\:quick); the check reads the values themselves
    assert cli_check.problems(["backend=sdpa,my_pkg.attn:fast"]) == []
    assert cli_check.problems(["backend=choice(sdpa,my_pkg.attn:fast)"]) == []
    assert "'my_pkg.attn::fast'" in cli_check.problems(["backend=sdpa,my_pkg.attn::fast"])[0]


OPTION_PLUGINS = """
from dataclasses import dataclass
from selfattn.backends import backend
from selfattn.fields import spec

@dataclass(frozen=True)
class Options:
    block: int = spec(64, ge=1, help="keys per step")

@backend(options=Options)
def blocked(q, k, v, *, causal, window, key_lengths, document_ids, scale, block):
    raise NotImplementedError

def plain(q, k, v, *, causal, window, key_lengths, document_ids, scale):
    raise NotImplementedError
"""


@pytest.fixture
def option_plugins(tmp_path, monkeypatch):
    """cli_plugins:blocked (one option, block) and cli_plugins:plain (none) on sys.path."""
    from selfattn.backends import registry

    (tmp_path / "cli_plugins.py").write_text(OPTION_PLUGINS)
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.forget()
    yield
    registry.forget()


@pytest.mark.parametrize("overrides, message", [
    (["backend=cli_plugins:blocked", "backend.block=7"], None),
    (["backend=naive,chunked", "+backend.q_chunk=64"], None),  # `+` adds the key where it is missing
    (["experiment=quick", "backend.q_chunk=64"], None),  # the grids pick chunked
    # a key the experiment's grids set would change nothing: refused (runners/cli_check.overridden_by_grids)
    (["experiment=quick", "backend=cli_plugins:blocked"], "backend: experiment=quick's grids set it for each of their "
     "points, so backend= on the command line would change nothing; leave it out, or sweep backend without "
     "experiment=quick"),
    (["backend=cli_plugins:blocked", "backend.blok=7"], "backend.blok: unknown key; did you mean backend.block?"),
    (["backend=cli_plugins:plain", "backend.block=7"], "backend.block: not an option of cli_plugins:plain, "
                                                       "which has none"),
    (["backend=cli_plugins:blocked", "backend.q_chunk=64"], "backend.q_chunk: not an option of cli_plugins:blocked; "
                                                            "chunked has it"),
    # Hydra composes each job with every override: an option that one named back end lacks stops the sweep
    (["backend=naive,chunked", "backend.q_chunk=64"], "backend.q_chunk: not an option of naive; chunked has it"),
    (["backend=sdpa,cli_plugins:blocked", "backend.block=7"], "backend.block: not an option of sdpa; "
                                                              "cli_plugins:blocked has it"),
])
def test_a_plugins_options_are_checked_like_a_builtins(option_plugins, overrides, message):
    assert cli_check.problems(overrides) == ([message] if message else [])


def test_an_option_of_a_plugin_that_cannot_be_loaded_names_why(option_plugins):
    found = cli_check.problems(["backend=cli_plugins_gone:fast", "backend.block=7"])
    assert len(found) == 1 and found[0].startswith("backend.block: not an option of cli_plugins_gone:fast"), found
    assert "import failed" in found[0], found


def test_a_search_path_with_the_plugin_source_keeps_every_check(tmp_path, monkeypatch):
    # docs/plugins.md's form, hydra.searchpath=[selfattn-backend://,file://...]: the source is no folder of
    # options, and must not turn the check off (Hydra's search-path block for precision=float16)
    mine = tmp_path / "my_conf"
    (mine / "experiment").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    found = cli_check.problems(["precision=float16", "backend=sdpx", f"hydra.searchpath=[selfattn-backend://,file://{mine}]"])
    assert [p.split(":")[0] for p in found] == ["backend", "precision"], found


def test_a_search_path_without_the_plugin_source_refuses_a_plugin_before_hydra_does(tmp_path):
    # Hydra would measure the built-ins' points, then stop at "Could not find 'backend/my_pkg.attn:fast'"
    searchpath = f"hydra.searchpath=[file://{tmp_path}]"
    found = cli_check.problems(["backend=sdpa,my_pkg.attn:fast", searchpath])
    assert len(found) == 1 and "selfattn-backend://" in found[0] and "my_pkg.attn:fast" in found[0], found
    assert cli_check.problems(["backend=sdpa,naive", searchpath]) == []  # built-ins have their files


def test_a_refusal_does_not_import_torch():
    """The check runs before runners.sweep imports torch and Hydra, so a typo is refused in a fraction of a
    second: it must not import torch itself (a built-in's option keys come from selfattn/backends/options/)."""
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "import sys\n"
        "from runners import cli_check\n"
        "for args in ([\"seqlen=512\"], [\"backend=naive,chunkd\"], [\"backend=naive\", \"backend.q_chunk=64\"],\n"
        "             [\"experiment=quick\", \"backend.chunk_size=64\"], [\"precision=float16\"]):\n"
        "    assert cli_check.problems(args), args\n"
        "cli_check.refuse_typos([\"-m\", \"experiment=quick\"])\n"
        "print(sorted(m for m in ('torch', 'runners.job', 'selfattn.backends.registry') if m in sys.modules))\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


def test_a_builtins_option_keys_read_without_torch_are_its_options_fields():
    from selfattn.backends import BACKEND_NAMES, get_backend
    from selfattn.fields import config_fields

    for name in BACKEND_NAMES:
        assert cli_check.builtin_options(name) == tuple(f.name for f in config_fields(get_backend(name).options_type)), name


def test_mask_names_and_their_parameters_are_checked_before_the_first_point():
    from runners import cli_check

    assert cli_check.problems(["mask=prefix_lm", "mask.prefix=3"]) == []
    assert cli_check.problems(["mask=prefix_lm", "mask.prefx=3"]) == ["mask.prefx: unknown key; did you mean mask.prefix?"]
    assert cli_check.problems(["mask.prefix=3"]) == [
        "mask.prefix: mask=none takes no parameters; name a mask first (mask=NAME)"]
    (line,) = cli_check.problems(["-m", "mask=prefix_lm,prefix_ml"][1:])
    assert line.startswith("mask: expected one of none, causal") and line.endswith("did you mean prefix_lm?")
    (line,) = cli_check.problems(["score_mod=no_such_module:f"])
    assert line.startswith("score_mod: cannot load no_such_module:f: ModuleNotFoundError")
