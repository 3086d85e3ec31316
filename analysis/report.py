"""`python -m analysis.report PATH [PATH ...] --out DIR`: figures, exponents and the chapter's claims.

Each PATH is a results.csv or a folder searched for them; rows from several sweeps and
devices merge (one row per point and device: an ok row beats a failed one, then the newest). Writes DIR/report.md,
DIR/figures/*.png (+ .pdf with --pdf) and the tables as CSV. Each figure that failed is named with its reason
on one line. Exit status 0 when a report was written, 1 when no input held a usable row or the rows call for
figures and none of them could be drawn (with --all-figures: when any of them could not).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from analysis import wandb_report
from analysis.claim import SHARED_RULES
from analysis.claims import (
    CHAPTER, NOT_DECIDED, NOT_DECIDED_BUSY, NOT_MEASURED, check_claims, claims_frame, studies_in_order, study_tables,
)
from analysis.compare import device_speedups, pick_baseline, speedup_table
from analysis.cost import cost_facets, exponent_table, memory_metric
from analysis.figures import FIGURES, Context, Made, Skipped
from analysis.judged import exponent_marks, facet_notes, left_out_text, marks, not_results, status_parts
from analysis.load import Loaded, NoUsableResults, describe_devices, load
from analysis.summary import summary_markdown


@dataclass
class Report:
    path: Path  # DIR/report.md
    loaded: Loaded
    figures: list[Made | Skipped]
    claims: pd.DataFrame  # every study's claims (its `study` column), the chapter's first
    exponents: pd.DataFrame
    devices: pd.DataFrame  # device comparison table (empty with one device)


def write_report(paths: Sequence[str | Path], out_dir: str | Path, *, baseline_device: str | None = None,
                 formats: Sequence[str] = ("png",), figures: Sequence[Callable] = FIGURES,
                 warn: bool = True) -> Report:
    """Load `paths`, draw `figures` into out_dir/figures, write out_dir/report.md; raises NoUsableResults.

    A figure that raises is a Skipped whose reason starts with "failed"; its traceback, and every warning a figure
    gave, go to out_dir/report.log (LOG_NAME), never to the console."""
    out_dir = Path(out_dir)
    loaded = load(paths, warn=warn)
    rows = loaded.rows
    ctx = Context(out_dir / "figures", formats=tuple(formats), baseline_device=baseline_device)
    made = draw_figures(figures, rows, ctx, out_dir / LOG_NAME)
    claims = claims_frame(check_claims(rows))
    tables = study_tables(rows)
    exponents = exponent_table(rows)
    exponents["not_results"] = exponent_marks(exponents, [*cost_facets(rows, "time_ms"),
                                                          *cost_facets(rows, memory_metric(rows))])
    devices = pd.DataFrame()
    baseline_note = None
    if rows[rows["status"] == "ok"]["device_label"].nunique() > 1:
        baseline, baseline_note = pick_baseline(rows, baseline_device)
        devices = speedup_table(device_speedups(rows, baseline)).assign(baseline=baseline)
        devices["not_results"] = marks(devices["backend"], rows)
    out_dir.mkdir(parents=True, exist_ok=True)
    claims.to_csv(out_dir / "claims.csv", index=False)
    exponents.to_csv(out_dir / "exponents.csv", index=False)
    if not devices.empty:
        devices.to_csv(out_dir / "devices_compared.csv", index=False)
    path = out_dir / "report.md"
    path.write_text(render(loaded, made, claims, exponents, devices, paths, out_dir, baseline_note, tables,
                           summary_markdown(rows)))
    return Report(path, loaded, made, claims, exponents, devices)


LOG_NAME = "report.log"  # beside report.md: what the figures that failed (or warned) had to say


def draw_figures(figures: Sequence[Callable], rows: pd.DataFrame, ctx: Context, log_path: Path) -> list[Made | Skipped]:
    """Each figure in turn, in this process. One that raises becomes a Skipped saying why in one line (one broken
    figure must not cost the user the rest of the report); its traceback and the warnings a figure gave are
    appended to `log_path`, which is written only when there is something to say."""
    made: list[Made | Skipped] = []
    log: list[str] = []
    for make in figures:
        name = getattr(make, "__name__", str(make))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                made.append(make(rows, ctx))
            except Exception as exc:  # noqa: BLE001  (any failure of one figure is that figure's, reported)
                reason = _one_line(f"{type(exc).__name__}: {exc}")
                made.append(Skipped(name, name, f"failed: {reason}", "—"))
                log += [f"figure {name}: failed", traceback.format_exc()]
                _close_open_figures()
        log += [f"figure {name}: {w.category.__name__}: {w.message} ({w.filename}:{w.lineno})" for w in caught]
    if log:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text("\n".join(log) + "\n")
    return made


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _close_open_figures() -> None:
    """Close the figures a failed figure function left open (pyplot keeps them until closed)."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.close("all")


def render(loaded: Loaded, figures, claims: pd.DataFrame, exponents: pd.DataFrame, devices: pd.DataFrame,
           paths: Sequence[str | Path], out_dir: Path, baseline_note: str | None,
           tables: Sequence[tuple[str, str, pd.DataFrame]] = (), summary: str | None = None) -> str:
    """report.md's text."""
    head, tail = _text_parts(loaded, claims, exponents, devices, paths, out_dir, baseline_note, tables, summary)
    return "\n".join([*head, *_figure_lines(figures, out_dir), *tail])


def _text_parts(loaded: Loaded, claims: pd.DataFrame, exponents: pd.DataFrame, devices: pd.DataFrame,
                paths: Sequence[str | Path], out_dir: Path, baseline_note: str | None,
                tables: Sequence[tuple[str, str, pd.DataFrame]] = (),
                summary: str | None = None) -> tuple[list[str], list[str]]:
    """report.md's lines before its figures' section (up to its heading) and after it."""
    rows = loaded.rows
    chapter = claims[claims["study"] == CHAPTER].reset_index(drop=True)
    status_text = status_parts(rows)
    times = rows["time"].dropna()
    lines = [
        "# selfattn-bench report", "",
        f"Generated by `python -m analysis.report {' '.join(str(p) for p in paths)} --out {out_dir}` from "
        f"{len(rows)} measured points ({status_text}) in {len(loaded.files)} file(s)"
        + (f"; {loaded.duplicates_dropped} older duplicate rows replaced by newer ones" if loaded.duplicates_dropped else "")
        + (f"; measured {times.min():%Y-%m-%d %H:%M} to {times.max():%Y-%m-%d %H:%M} UTC" if len(times) else "")
        + ".", "",
        *_sweeps_line(rows),
        *_not_results_section(rows),
        "## What was measured", "",
        "The swept axes (the point's fields that take more than one value here) against each back end.", "",
        summary_markdown(rows) if summary is None else summary, "",
        "## Devices", "", _devices_table(rows), "",
        "## The chapter's claims, checked", "",
        "Each verdict is computed from the rows by the rule under the table: **holds** when every measured group "
        "passes, **does not hold** when any fails (the evidence names it), **not decided at these sizes** when none "
        "fails but some cannot be decided from the sizes measured (the verdict says what each needs), **not decided (N "
        "of M points measured on a busy machine)** when its evidence rests on the times of rows flagged noisy (their "
        "samples' spread or other processes' CPU share passed a limit: the verdict could flip in the next run), **not "
        "measured** when the rows are missing.",
        "", *_claims_section(chapter),
        *_studies_section(claims, tables),
        "## Fitted exponents", "",
        "Theil-Sen slope of log y on log n (the median of the slopes between every pair of sizes, with its 95% "
        "interval from Kendall's tau, so one point slowed by load moves it little) over the larger sizes (the top "
        "one and a half octaves of the measured seq_len values or their upper half, whichever holds more, at least "
        "3); a slope "
        "of 2 is quadratic. The slice is the one in figures 1 and 2. Memory is the exact peak of bytes allocated "
        "through torch's allocator during the call (peak_alloc_bytes). Small sizes are left out of b because fixed "
        "costs (Python, kernel launches, thread buffers) dominate there.", "",
        "A slope reaches 2 only where the n² term dominates, so the cost claims (rules 1-3) also read a cost model "
        "of each line over every size: fixed + linear·n + quadratic·n² with non-negative terms (least squares on "
        "relative residuals), and the n² term's share of the cost at the largest n with its 95% interval from a "
        "residual bootstrap. \"model off\" marks a line the model does not follow (rms log residual above twice "
        "the scatter between repeats, and above 3%): a cache cliff, or a straight log-log line that is not "
        "fixed + linear + n².", "",
        _exponent_table(exponents), "",
        *_exponents_left_out(rows),
        "## Figures", "",
        *_figures_left_out(rows),
    ]
    tail: list[str] = []
    if not devices.empty:
        tail += ["## Devices compared", "",
                 f"Speed-up = time on {devices['baseline'].iloc[0]} / time on the device, over points measured on "
                 "both (geometric mean over every matched point, and at the largest common n).", "",
                 _speedup_table(devices), "",
                 "To measure a row's largest-n point again (on the device, then on the baseline):", "",
                 *[f"- {r.device}, {r.backend}: `{r.repro_at_largest_n}`; baseline: `{r.baseline_repro_at_largest_n}`"
                   for r in devices.itertuples()], ""]
    problems = loaded.problems + ([baseline_note] if baseline_note else [])
    if problems:
        tail += ["## Input problems", "", *[f"- {p}" for p in problems], ""]
    return lines, tail


def _not_results_section(rows: pd.DataFrame) -> list[str]:
    """The back ends with incorrect, timed-out or crashed rows (analysis.judged), worst first, before anything that
    ranks back ends: how many of each one's points, and the first reasons. Nothing when there are none."""
    table = not_results(rows)
    if table.empty:
        return []
    def cell(record: pd.Series, status: str) -> str:
        return f"{record[status]} of {record['measured']}" if record[status] else "—"
    frame = pd.DataFrame({
        "Back end": table["backend"],
        **{f"{status.capitalize()}": [cell(r, status) for _, r in table.iterrows()] for status in ("incorrect", "timeout", "crashed")},
        "Points left out": [f"{r['left_out']} of {r['measured']}" for _, r in table.iterrows()],
        "First reasons": table["reasons"].replace("", "—")})
    return ["## Not results: incorrect, timed-out and crashed back ends", "",
            "A row whose output missed its tolerance (incorrect), that ran past its time limit (timeout) or whose "
            "process ended (crashed) is no result: results.csv keeps its time and errors for inspection, but no "
            "table stars it, no claim or fitted exponent reads it and no figure draws it; every table, claim and "
            "figure below that ranks these back ends names them. Points: those the back end ran (not refused). "
            "What each status means and what to do: docs/usage.md#statuses.", "",
            _markdown(frame), ""]


def _exponents_left_out(rows: pd.DataFrame) -> list[str]:
    """The line under the exponent table naming, per panel, the back ends with judged rows and no line at all (a line
    fitted from a back end's other points says so in its Back end cell)."""
    facets = [*cost_facets(rows, "time_ms"), *cost_facets(rows, memory_metric(rows))]  # remembered: not refitted
    notes = facet_notes(facets, "no line fitted", without_line=True)
    return [f"*{'; '.join(notes)}.*", ""] if notes else []


def _figures_left_out(rows: pd.DataFrame) -> list[str]:
    """One line before the figures: no figure draws a judged row (the cost figures' notes name theirs by panel)."""
    text = left_out_text(rows)
    return [f"*No figure draws a row that is not a result:* {text}.", ""] if text else []


def failed_figures(figures: Sequence[Made | Skipped]) -> list[Skipped]:
    """The figures whose rows were there but whose drawing raised (draw_figures turns that into a Skipped whose
    reason starts with "failed"); a Skipped for want of rows is not a failure."""
    return [f for f in figures if isinstance(f, Skipped) and f.reason.startswith("failed")]


def figure_summary(report: Report) -> tuple[list[str], bool]:
    """The lines that say what the report drew (its path and counts, then one line per figure that failed: which,
    why, and the log holding its traceback), and whether it failed: figures its rows call for (drawn or failed)
    and none of them drawn."""
    made = sum(isinstance(f, Made) for f in report.figures)
    failed = failed_figures(report.figures)
    figures_dir = report.path.parent / "figures"
    log = report.path.parent / LOG_NAME
    lines = [f"report: {report.path} ({made} figure{'' if made == 1 else 's'} in {figures_dir}"
             + (f"; {len(failed)} of the {made + len(failed)} its rows call for failed" if failed else "") + ")"]
    lines += [f"report: figure {f.name} not drawn: {f.reason.removeprefix('failed: ')} (traceback in {log})"
              for f in failed]
    return lines, bool(failed) and made == 0


def _figure_lines(figures: Sequence[Made | Skipped], out_dir: Path) -> list[str]:
    """The figures' section: each drawn figure with how to read it, and each that failed with its reason. A figure
    whose rows are absent (a study the sweep did not run) is not listed."""
    lines: list[str] = []
    for index, fig in enumerate(figures, start=1):
        if isinstance(fig, Skipped) and not fig.reason.startswith("failed"):
            continue
        numbered = re.match(r"fig(\d+)_", fig.name)  # keep the numbering when only some are drawn
        number = numbered.group(1) if numbered else str(index)
        lines.append(f"### {number}. {fig.title}")
        lines.append("")
        if isinstance(fig, Skipped):
            lines.append(f"*Not drawn: {fig.reason} (the traceback is in {LOG_NAME}).*")
        else:
            png = [p for p in fig.files if p.suffix == ".png"]
            others = [p for p in fig.files if p.suffix != ".png"]
            if png:
                lines.append(f"![{fig.title}]({_rel(png[0], out_dir)})")
                lines.append("")
            lines.append(fig.how_to_read + " " + " ".join(f"[{p.suffix[1:].upper()}]({_rel(p, out_dir)})"
                                                        for p in others))
            if fig.notes:
                lines.append("")
                lines.append("Slice: " + "; ".join(fig.notes) + ".")
        lines.append("")
    if not lines:
        lines = ["*No figure: these rows call for none.*", ""]
    return lines


def _sweeps_line(rows: pd.DataFrame) -> list[str]:
    """Which sweeps (experiment/folder) and harness commits the rows come from: provenance, not prose."""
    sweeps = rows.groupby(rows["sweep_id"].replace("", "(no sweep id)")).size()
    shas = sorted({sha[:12] + ("-dirty" if sha.endswith("-dirty") else "") for sha in rows["git_sha"] if sha})
    text = "Sweeps: " + ", ".join(f"`{name}` ({count} rows)" for name, count in sweeps.items())
    if shas:
        text += "; harness commit" + ("s " if len(shas) > 1 else " ") + ", ".join(f"`{s}`" for s in shas)
    return [text + ".", ""]


def _rel(path: Path, base: Path) -> str:
    try:
        return path.relative_to(base).as_posix()
    except ValueError:
        return path.as_posix()


def _cell(text: object) -> str:
    """A pipe or newline inside a cell would end the cell or the row."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _markdown(frame: pd.DataFrame) -> str:
    """A pipe table of already formatted text: tabulate must not re-parse '2.10' into 2.1."""
    return frame.map(_cell).to_markdown(index=False, disable_numparse=True)


def _claims_section(claims: pd.DataFrame) -> list[str]:
    """A study's claims table and, under it, each claim's own rule; a part several rules share
    (analysis.claim.shared_rule) is printed once after them, each rule naming it."""
    rules, shared = [], {}
    for rule in claims["rule"]:
        for name, text in SHARED_RULES.items():
            if text in rule:
                rule = rule.replace(text, f"Lines are judged by {name}, below.")
                shared[name] = text
        rules.append(rule)
    return [_claims_table(claims), "", "Rules:", "", *[f"{i + 1}. {rule}" for i, rule in enumerate(rules)], "",
            *[line for name, text in shared.items() for line in (f"*{name[0].upper()}{name[1:]}:* {text}", "")]]


def _studies_section(claims: pd.DataFrame, tables: Sequence[tuple[str, str, pd.DataFrame]]) -> list[str]:
    """The other studies' claims and tables (masks, GQA, ...), each only when its rows are present."""
    lines: list[str] = []
    for study in studies_in_order():
        found = claims[claims["study"] == study]
        extra = [(caption, table) for s, caption, table in tables if s == study]
        if study == CHAPTER or (found.empty and not extra):
            continue
        lines += [f"## {study}: findings", ""]
        if not found.empty:
            lines += _claims_section(found.reset_index(drop=True))
        for caption, table in extra:
            lines += [caption, "", _markdown(table), ""]
    return lines


def _claims_table(claims: pd.DataFrame) -> str:
    verdicts = "**" + claims["verdict"] + "**"
    # what to run next: also where the rows left out a metric the claim reads ("not measured: metric off (...)")
    open_ = claims["verdict"].str.startswith(NOT_MEASURED) | claims["verdict"].str.startswith(NOT_DECIDED_BUSY)  # both kinds
    verdicts[open_] += " (run `" + claims.loc[open_, "experiment"] + "`)"
    return _markdown(pd.DataFrame({"#": range(1, len(claims) + 1), "Claim": claims["claim"],
                                   "Measured evidence": claims["evidence"], "Verdict": verdicts}))


def _marked(table: pd.DataFrame) -> pd.Series:
    """The Back end cells, each with its points that are not results after it ('triton_bad (3 incorrect of 12
    points)'), where the table has the `not_results` column."""
    if "not_results" not in table:
        return table["backend"]
    return table["backend"] + table["not_results"].map(lambda text: f" ({text})" if text else "")


def _fit_cell(b: float, low: float, high: float) -> str:
    if math.isnan(b):
        return "—"
    if math.isnan(low):
        return f"{b:.2f} (2 sizes)"
    return f"{b:.2f} [{low:.2f}, {high:.2f}]"


def _exponent_table(table: pd.DataFrame) -> str:
    if table.empty:
        return "*No back end was measured at two or more seq_len values.*"
    fits = {prefix: [_fit_cell(b, low, high) for b, low, high in
                     zip(table[f"{prefix}_exponent"], table[f"{prefix}_ci_low"], table[f"{prefix}_ci_high"])]
            for prefix in ("time", "mem")}
    columns = [("Device", table["device"]), ("Precision", table["precision"]), ("Back end", _marked(table)),
               ("Mask", table["causal"].map(lambda c: "causal" if c else "no mask")),
               ("Time b [95% CI]", fits["time"]), ("n fitted (sizes)", table["time_sizes"].replace("", "—")),
               ("Memory b [95% CI]", fits["mem"]), ("n fitted (sizes)", table["mem_sizes"].replace("", "—")),
               ("Memory 4K→128K", table["mem_ratio_4k_128k"].map(lambda r: "—" if math.isnan(r) else f"×{r:,.0f}"))]
    columns.insert(6, ("Time n² share [95% CI]", _share_cells(table, "time")))
    columns.append(("Memory n² share [95% CI]", _share_cells(table, "mem")))
    # Two columns share a header ("n fitted (sizes)"), which a dict of columns cannot hold.
    frame = pd.DataFrame({i: list(values) for i, (_, values) in enumerate(columns)})
    frame.columns = [name for name, _ in columns]
    return _markdown(frame)


def _share_cells(table: pd.DataFrame, prefix: str) -> list[str]:
    """'81% [75, 97]' per line: the cost model's n² share at the largest n, or how far off a model that misses is."""
    cells = []
    for share, low, high, residual, fits in zip(table[f"{prefix}_n2_share"], table[f"{prefix}_n2_share_low"],
                                                table[f"{prefix}_n2_share_high"], table[f"{prefix}_model_residual"],
                                                table[f"{prefix}_model_fits"]):
        if math.isnan(share):
            cells.append("—")
        else:
            cells.append(f"{100 * share:.0f}% [{100 * low:.0f}, {100 * high:.0f}]"
                         + ("" if fits else f" (model off {100 * residual:.0f}%)"))
    return cells


def _speedup_table(devices: pd.DataFrame) -> str:
    two = "{:.2f}".format
    return _markdown(pd.DataFrame({
        "Device": devices["device"], "Back end": _marked(devices),
        "Kernel (device / baseline)": devices["kernel"] + " / " + devices["baseline_kernel"], "Points": devices["points"],
        "Geo-mean ×": devices["geomean_speedup"].map(two), "Min ×": devices["min_speedup"].map(two),
        "Max ×": devices["max_speedup"].map(two), "Largest n": devices["largest_n"],
        "× at largest n": devices["speedup_at_largest_n"].map(two)}))


def _devices_table(rows: pd.DataFrame) -> str:
    info = describe_devices(rows)
    mem = info["device_mem_bytes"] if "device_mem_bytes" in info else pd.Series(math.nan, index=info.index)
    return _markdown(pd.DataFrame({
        "Label": info["device_label"], "Kind": info["device"], "Name": info["device_name"],
        "Capability": info["device_capability"].map(lambda v: str(v or "—")),
        "Memory": mem.map(lambda m: "—" if pd.isna(m) else f"{m / 2**30:.0f} GiB"),
        "Host": info["hostname"].map(lambda v: str(v or "—")),
        "torch": info["torch_version"].map(lambda v: str(v or "—")),
        "ok / rows": info["ok"].astype(str) + " / " + info["rows"].astype(str)}))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.report", description="Figures, fitted exponents and the chapter's claims checked, from results.csv files "
                                     "(several sweeps and devices merge; an ok row of a point beats a failed one, then the newest wins).",
                                     epilog="It reads only CSV files. A sweep still running or killed may have no results.csv yet, or "
                                     "one behind its row files: `python -m runners.rows DIR` builds it (resuming the sweep does too).")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="results.csv files or folders holding them")
    parser.add_argument("--out", required=True, metavar="DIR", help="where report.md and figures/ go")
    parser.add_argument("--baseline-device", default=None, metavar="NAME",
                        help="device the others are compared with (label or name, substring ok); default: most rows")
    parser.add_argument("--pdf", action="store_true",
                        help="also write a PDF copy of each figure (for papers; embedding fonts makes it slower)")
    parser.add_argument("--formats", default="png", help="figure formats, comma separated (png,pdf,svg)")
    parser.add_argument("--all-figures", action="store_true",
                        help="exit 1 when any figure its rows call for failed (default: only when none was drawn)")
    wandb_report.add_arguments(parser)
    args = parser.parse_args(argv)
    formats = [f.strip().lower() for f in args.formats.split(",") if f.strip()]
    allowed = {"png", "pdf", "svg"}
    if not formats or not set(formats) <= allowed:
        parser.error(f"--formats: expected a comma-separated subset of png, pdf, svg, got {args.formats!r}")
    if args.pdf and "pdf" not in formats:
        formats.append("pdf")
    if "png" in formats:  # the README embeds PNGs: write them first so their layout is the solved one
        formats.remove("png")
        formats.insert(0, "png")
    try:
        report = write_report(args.paths, args.out, baseline_device=args.baseline_device, formats=formats)
    except NoUsableResults as exc:
        print(f"analysis: {exc}", file=sys.stderr)
        return 1
    lines, none_drawn = figure_summary(report)
    print(lines[0])
    for line in lines[1:]:  # the failures: on stderr, where a script looks for what went wrong
        print(line, file=sys.stderr)
    wandb_report.log_from_cli(args, report.path, args.paths)  # after the files: wandb never changes them
    if none_drawn:
        print("analysis: no figure its rows call for could be drawn (see the lines above)", file=sys.stderr)
        return 1
    if args.all_figures and len(lines) > 1:
        print(f"analysis: --all-figures: {len(lines) - 1} figure(s) its rows call for failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
