"""analysis/wandb_report.py without wandb: what it reads from a written report, verdict words, names.

The runs themselves (offline, read back from their folders) are tested in tests/runners/test_wandb_runs.py."""

import re

import pytest

from analysis.claim import FAILS, HOLDS, METRIC_OFF, NOT_DECIDED, NOT_MEASURED
from analysis.wandb_report import artifact_name, describe_inputs, group_for, read_claims, report_files, verdict_word


@pytest.mark.parametrize("verdict, word", [
    (HOLDS, "holds"), (FAILS, "does not hold"), (f"{NOT_DECIDED} (chunked: needs n >= 6144)", "not decided"),
    (NOT_MEASURED, "not measured"), (f"{METRIC_OFF} (stability)", "not measured"),
])
def test_a_verdict_is_reduced_to_its_word(verdict, word):
    assert verdict_word(verdict) == word


def test_an_unknown_verdict_is_kept_whole_not_guessed():
    assert verdict_word("holders") == "holders"  # "holds" is not a prefix word of it


def test_the_figures_are_those_report_md_links_not_whatever_the_folder_holds(tmp_path):
    figures = tmp_path / "figures"
    figures.mkdir()
    for name in ("fig1_time_vs_seq_len.png", "fig1_time_vs_seq_len.pdf", "fig2_memory_vs_seq_len.png",
                 "fig5_stale_from_an_earlier_report.png"):
        (figures / name).write_bytes(b"x")
    (tmp_path / "claims.csv").write_text("key,claim,evidence,verdict,rule,experiment,study\n")
    md = tmp_path / "report.md"
    md.write_text("# r\n\n### 1. Time\n\n![Time vs n](figures/fig1_time_vs_seq_len.png)\n\nRead it. "
                  "[PDF](figures/fig1_time_vs_seq_len.pdf)\n\n### 2. Memory\n\n"
                  "![Memory](figures/fig2_memory_vs_seq_len.png)\n\n"
                  "![gone](figures/fig3_not_written.png) [a site](https://example.org/x.png)\n")
    found = report_files(md)
    assert [(key, path.name, caption) for key, path, caption in found.images] == [
        ("figures/fig1_time_vs_seq_len", "fig1_time_vs_seq_len.png", "Time vs n"),
        ("figures/fig2_memory_vs_seq_len", "fig2_memory_vs_seq_len.png", "Memory")]
    assert [p.name for p in found.linked] == ["fig1_time_vs_seq_len.png", "fig1_time_vs_seq_len.pdf",
                                             "fig2_memory_vs_seq_len.png"]
    assert set(found.tables) == {"claims"}  # no exponents.csv was written


def test_claims_csv_becomes_the_tables_columns(tmp_path):
    path = tmp_path / "claims.csv"
    path.write_text('key,claim,evidence,verdict,rule,experiment,study\n'
                    'causal_half,"A causal mask saves half","ratio 1.9",holds,"ratio >= 1.6",causal_mask,'
                    'The chapter\'s claims\n')
    assert read_claims(path) == [{"claim": "causal_half", "statement": "A causal mask saves half", "verdict": "holds",
                                  "evidence": "ratio 1.9", "rule": "ratio >= 1.6", "study": "The chapter's claims"}]


def test_inputs_name_their_sweeps_devices_and_hosts(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("sweep_id,device,device_name,hostname\n" + "cross_gpu/h100,cuda,NVIDIA H100,n1\n" * 2)
    b.write_text("sweep_id,device,device_name,hostname\ncross_gpu/a100,cuda,,n2\n")  # no name: the device kind
    assert describe_inputs([a, b]) == {"sweeps": ["cross_gpu/a100", "cross_gpu/h100"],
                                       "devices": ["NVIDIA H100", "cuda"], "hosts": ["n1", "n2"]}


def test_the_group_is_the_sweep_or_the_sweeps_joined_and_stays_short():
    assert group_for(["quick/2026-01-01_10-00-00"]) == "quick/2026-01-01_10-00-00"
    assert group_for(["cross_gpu/h100", "cross_gpu/a100", "cross_gpu/h100"]) == "cross_gpu/a100+cross_gpu/h100"
    assert group_for([]) == ""
    many = [f"cross_gpu/node-{i:03d}" for i in range(40)]
    long, other = group_for(many), group_for(many[:-1])
    assert len(long) <= 120 and long != other  # the hash keeps two long merges apart


def test_an_artifact_name_holds_only_what_wandb_accepts():
    name = artifact_name("quick/2026-01-01_10-00-00+cross gpu/h100")
    assert name == "sweep-results-quick-2026-01-01_10-00-00-cross-gpu-h100"
    assert re.fullmatch(r"[A-Za-z0-9._-]+", name)
