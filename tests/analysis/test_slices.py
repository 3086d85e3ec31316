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
