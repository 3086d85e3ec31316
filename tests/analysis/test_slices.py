"""Fixed slices: the value kept for an axis is the one whose rows cover the most of what a figure varies."""

import pandas as pd

from analysis.slices import fix_axes


def rows(records):
    return pd.DataFrame([{"status": "ok", **r} for r in records])


def test_richest_value_wins_over_the_conventional_one():
    # fwd_bwd covers three seq_len values, fwd only one: a time-vs-n figure needs fwd_bwd here
    data = rows([{"mode": "fwd", "seq_len": 256}] + [{"mode": "fwd_bwd", "seq_len": n} for n in (256, 512, 1024)])
    chosen = fix_axes(data, ["mode"], ["seq_len"])
    assert chosen.fixed == {"mode": "fwd_bwd"} and len(chosen.rows) == 3


def test_ties_go_to_the_conventional_value_and_the_title_says_which():
    data = rows([{"scale": s, "seq_len": n} for s in ("none", "auto") for n in (256, 512)])
    chosen = fix_axes(data, ["scale"], ["seq_len"])
    assert chosen.fixed == {"scale": "auto"}
    assert chosen.describe() == "scaled 1/√d_k"


def test_failed_rows_do_not_count_as_coverage():
    data = rows([{"head_dim": 64, "seq_len": n} for n in (256, 512)]
                + [{"head_dim": 16, "seq_len": n, "status": "oom"} for n in (256, 512, 1024)])
    assert fix_axes(data, ["head_dim"], ["seq_len"]).fixed == {"head_dim": 64}


def test_single_valued_axes_are_kept_but_not_described_unless_asked():
    data = rows([{"heads": 8, "head_dim": 64, "seq_len": n} for n in (256, 512)])
    chosen = fix_axes(data, ["heads", "head_dim"], ["seq_len"])
    assert chosen.describe() == "" and chosen.describe(always=["head_dim"]) == "d_k=64"


def off_plain(axis):
    """A value of `axis` that is not its plain value (its default)."""
    from selfattn.point import axis_default

    default = axis_default(axis)
    if isinstance(default, bool):
        return not default
    if isinstance(default, str):
        return default + "-other"
    return 3 if default is None else default + 0.5


def test_an_axis_not_marked_plain_false_is_held_at_its_default_unless_a_study_names_it():
    from analysis.slices import plain_rows, self_attention
    from selfattn.point import ABLATIONS

    assert {"window", "kv_heads", "score", "pos_enc", "softcap", "input_outliers"} <= set(ABLATIONS)
    assert not {"backend", "seq_len", "head_dim", "precision", "causal", "scale", "seed", "new_tokens"} & set(ABLATIONS)
    for axis in ABLATIONS:
        data = rows([{"seq_len": 256, "q_len": 256, "heads": 8, "precision": "fp32"},
                     {"seq_len": 256, "q_len": 256, "heads": 8, "precision": "fp32", axis: off_plain(axis)}])
        assert len(fix_axes(data, ["precision"], ["seq_len"]).rows) == 1, axis
        assert len(plain_rows(data)) == len(self_attention(data)) == 1, axis
        # the negative control: a study that names the axis reads both rows
        assert len(fix_axes(data, ["precision"], ["seq_len", axis]).rows) == 2, axis
        assert len(plain_rows(data, vary=(axis,))) == len(self_attention(data, vary=(axis,))) == 2, axis


def test_a_null_that_stands_for_another_field_is_plain_where_the_row_holds_that_value():
    from analysis.slices import plain

    data = rows([{"heads": 8, "kv_heads": 8}, {"heads": 8, "kv_heads": 2}, {"heads": 8, "kv_heads": None}])
    assert plain(data, "kv_heads").tolist() == [True, False, True]
