"""`python -m selfattn.measure.remeasure`: show, or measure again, this machine's cached device probes.

    python -m selfattn.measure.remeasure                         # what the cache holds (selfattn/measure/probes.py)
    python -m selfattn.measure.remeasure --remeasure             # the matmul peak (fp32) and copy bandwidth, again
    python -m selfattn.measure.remeasure --remeasure --precision fp32 bf16 --device cuda

Run it on a quiet machine: a peak measured while other processes hold the cores is kept until then.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from selfattn.measure import device as probes_of
from selfattn.measure import probes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m selfattn.measure.remeasure", description=__doc__.split("\n\n")[0])
    parser.add_argument("--remeasure", action="store_true", help="measure the probes again and cache them")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--precision", nargs="*", default=["fp32"], help="precisions whose matmul peak to measure")
    args = parser.parse_args(argv)
    from selfattn.precision import precision_context

    device = probes_of.resolve_device(args.device)
    key = probes_of.machine_key(device)
    path = probes.cache_file(key)
    if path is None:
        print(f"the probe cache is off ({probes.CACHE_ENV}={probes.OFF}): every process measures")
    if args.remeasure:
        probes.forget(key)
        probes_of.forget_peaks()
        for precision in args.precision:
            with precision_context(precision, device) as dtype:
                print(f"{precision}: matmul peak {probes_of.device_peak_tflops(device, dtype):.3g} TFLOP/s")
        print(f"copy bandwidth {probes_of.device_peak_gbps(device):.3g} GB/s")
    if path is not None:
        cached = probes.read(key).get("probes", {})
        print(f"{path}:" if cached else f"{path}: nothing cached yet")
        for probe, entry in sorted(cached.items()):
            print(f"  {probe}: {entry.get('value'):.4g} {entry.get('unit', '')} (measured {entry.get('measured_at')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
