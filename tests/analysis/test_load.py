"""Loading: bad inputs are one-line errors naming the file and column; merges keep the newest row."""

import pandas as pd
import pytest

from analysis.load import NoUsableResults, load
from selfattn.results import SCHEMA_VERSION


@pytest.fixture
def good_csv(tmp_path, fabricate):
    return fabricate().quadratic_cost(sizes=(256, 512)).write(tmp_path / "good" / "results.csv")


def test_folder_is_searched_for_results_csv(good_csv):
    loaded = load([good_csv.parent.parent], warn=False)
    assert loaded.files == [good_csv] and not loaded.problems
    assert set(loaded.rows["backend"]) == {"naive", "sdpa", "chunked"}


def test_missing_column_names_file_and_column_and_other_files_still_load(tmp_path, good_csv, capsys):
    broken = tmp_path / "broken.csv"
    pd.read_csv(good_csv).drop(columns=["head_dim"]).to_csv(broken, index=False)
    loaded = load([broken, good_csv])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(broken) in err[0] and "'head_dim'" in err[0]
    assert loaded.files == [good_csv] and len(loaded.rows) > 0


def test_newer_schema_rows_are_skipped_with_one_line(tmp_path, good_csv, capsys):
    df = pd.read_csv(good_csv)
    df.loc[:3, "schema_version"] = SCHEMA_VERSION + 1
    mixed = tmp_path / "mixed.csv"
    df.to_csv(mixed, index=False)
    loaded = load([mixed])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(mixed) in err[0] and "schema_version" in err[0] and "4 rows" in err[0]
    assert len(loaded.rows) == len(df) - 4


@pytest.mark.parametrize("content", ["", "status,backend\n", "not,a,csv\n\x00\x01"], ids=["empty", "header-only", "garbage"])
def test_unusable_files_alone_raise_no_usable_results(tmp_path, content, capsys):
    path = tmp_path / "results.csv"
    path.write_text(content)
    with pytest.raises(NoUsableResults):
        load([path])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0]


def test_path_without_results_is_named(tmp_path, good_csv, capsys):
    empty = tmp_path / "nothing_here"
    empty.mkdir()
    loaded = load([empty, good_csv])
    err = capsys.readouterr().err
    assert f"{empty}: no results.csv found" in err
    assert len(loaded.rows) > 0


def test_invalid_status_rows_are_dropped_with_the_column_named(tmp_path, good_csv, capsys):
    df = pd.read_csv(good_csv)
    df.loc[0, "status"] = "exploded"
    path = tmp_path / "results.csv"
    df.to_csv(path, index=False)
    loaded = load([path])
    assert "'status'" in capsys.readouterr().err
    assert len(loaded.rows) == len(df) - 1


def test_refused_rows_with_values_as_typed_load_without_a_warning(tmp_path, good_csv, capsys):
    """The runner keeps a refused config's values as typed (seq_len 0, seq_len abc): the CSV holds them,
    loading warns of nothing, keeps the refused row whose values read as numbers (the report counts it),
    leaves out the one with text in a number column, and reads the measured rows exactly as before."""
    df = pd.read_csv(good_csv, dtype=str, keep_default_na=False)
    refused = [df.iloc[0].to_dict() | {"status": "invalid", "seq_len": typed, "causal": causal, "time_ms": "",
                                        "point_id": f"raw-{i}", "error": "seq_len: expected an integer >= 1"}
               for i, (typed, causal) in enumerate([("0", "false"), ("abc", "false"), ("64", "maybe")])]
    path = tmp_path / "results.csv"
    pd.concat([df, pd.DataFrame(refused)], ignore_index=True).to_csv(path, index=False)
    assert ",abc," in path.read_text()
    loaded = load([path])
    assert capsys.readouterr().err == "" and not loaded.problems
    invalid = loaded.rows[loaded.rows["status"] == "invalid"]
    assert invalid["seq_len"].tolist() == [0] and loaded.duplicates_dropped == 0
    alone = load([good_csv], warn=False).rows.drop(columns="source_file")
    pd.testing.assert_frame_equal(loaded.rows[loaded.rows["status"] != "invalid"].reset_index(drop=True)
                                  .drop(columns="source_file"), alone)  # the measured rows read as before, types too


def test_a_measured_row_with_a_bad_seq_len_is_still_skipped_with_its_column_named(tmp_path, good_csv, capsys):
    df = pd.read_csv(good_csv, dtype=str, keep_default_na=False)
    df.loc[0, "seq_len"] = "abc"
    path = tmp_path / "results.csv"
    df.to_csv(path, index=False)
    loaded = load([path])
    assert "'seq_len'" in capsys.readouterr().err and len(loaded.rows) == len(df) - 1


def test_same_point_on_same_device_keeps_the_newest_row(tmp_path, fabricate):
    old = fabricate().quadratic_cost(sizes=(256, 512)).frame()
    new = old.copy()
    new["timestamp"] = "2026-11-30T00:00:00+00:00"
    new["time_ms"] = 123.0
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    new.to_csv(tmp_path / "a" / "results.csv", index=False)  # newer file first: order must not matter
    old.to_csv(tmp_path / "b" / "results.csv", index=False)
    loaded = load([tmp_path], warn=False)
    assert len(loaded.rows) == len(old) and loaded.duplicates_dropped == len(old)
    assert (loaded.rows.loc[loaded.rows["status"] == "ok", "time_ms"] == 123.0).all()


def test_a_newer_failed_row_never_hides_an_ok_one_the_rule_results_csv_uses(tmp_path, fabricate):
    ok = fabricate().quadratic_cost(sizes=(256,)).frame()
    ok = ok[ok["status"] == "ok"]
    failed = ok.assign(status="oom", time_ms=float("nan"), timestamp="2026-11-30T00:00:00+00:00")
    ok.to_csv(tmp_path / "ok.csv", index=False)
    failed.to_csv(tmp_path / "failed.csv", index=False)
    loaded = load([tmp_path / "failed.csv", tmp_path / "ok.csv"], warn=False).rows
    assert len(loaded) == len(ok) and (loaded["status"] == "ok").all()
    # results.csv's own rule, on the same pair of rows, keeps the same one
    from runners.rows import best_rows

    pair = [{**failed.iloc[0].to_dict(), "point_id": "p"}, {**ok.iloc[0].to_dict(), "point_id": "p"}]
    assert [r["status"] for r in best_rows(pair)] == ["ok"]


def test_same_point_on_two_hosts_is_kept_twice_with_distinct_labels(tmp_path, fabricate):
    fabricate(hostname="node1", device="cuda", device_name="NVIDIA H200").quadratic_cost(sizes=(256,)).write(
        tmp_path / "1" / "results.csv")
    fabricate(hostname="node2", device="cuda", device_name="NVIDIA H200").quadratic_cost(sizes=(256,)).write(
        tmp_path / "2" / "results.csv")
    rows = load([tmp_path], warn=False).rows
    assert set(rows["device_label"]) == {"NVIDIA H200 @node1", "NVIDIA H200 @node2"}
    assert rows.groupby("device_label").size().nunique() == 1


def test_types_and_derived_columns(good_csv):
    rows = load([good_csv], warn=False).rows
    assert rows["causal"].map(type).eq(bool).all()
    assert rows["seq_len"].dtype.kind in "if" and set(rows["scale"]) == {"auto"}
    assert (rows["d_model"] == rows["heads"] * rows["head_dim"]).all()


def test_analysis_reads_the_schema_without_importing_torch():
    # The report only reads CSV files; torch's import alone costs seconds on a small machine.
    # analysis.report imports every study (analysis.claims) and figure (analysis.figures), compiled ones included.
    import subprocess
    import sys
    from pathlib import Path

    from selfattn.backends import BACKEND_NAMES

    root = Path(__file__).resolve().parents[2]
    # The schema, the sweep axes and the back ends' names, as the analysis imports them.
    probe = ("import sys, analysis.report, selfattn, selfattn.results, selfattn.point, selfattn.backends; "
             "print('torch' in sys.modules, selfattn.backends.BACKEND_NAMES)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"False {BACKEND_NAMES}" and BACKEND_NAMES[:3] == ("naive", "sdpa", "chunked")
