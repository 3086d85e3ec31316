"""analysis: results.csv files in, figures and a report with the chapter's claims checked out.

    python -m analysis.report sweeps/quick/results.csv other_gpu/ --out report

It reads only CSV files (the `selfattn.results` schema) and never measures anything:
load.py merges and validates, slices.py picks the fixed values of the axes a figure
does not vary, fit.py fits power laws, cost.py / claims.py compute what the figures and
tables show, figures/ draws, report.py writes report.md.
"""
