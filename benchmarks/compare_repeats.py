"""How far do repeated runs of the same work drift apart, and what does ``compare`` call them?

Runs the same workloads ``--repeats`` times each (NVML, 5 trials), one after another, then
compares every pair of repeats of a workload: the spread of the run medians (max/min - 1), and
the share of pairs the verdict calls significant with no minimum change and with the 1 % default.
Also compares each workload with a deliberately different one (a larger matrix) to check that
real changes are still found. This is the evidence behind ``--min-change``'s default
(docs/comparing.md).

Run on a GPU: ``python benchmarks/compare_repeats.py [--repeats 6] [--json out.json]``
(about 6 x 3 runs of ~15 s: 5 minutes).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from pathlib import Path

import energyframe as ef
from energyframe.compare import tables as compare_report
from energyframe.results import rundir

WORKLOADS = {
    "matmul-4096-fp16": "matmul:M=4096,K=4096,N=4096,dtype=fp16",
    "matmul-1024-fp16": "matmul:M=1024,K=1024,N=1024,dtype=fp16",
    "resnet50-b1": "resnet50:batch=1",
}
DIFFERENT = ("matmul-4096-fp16", "matmul:M=4096,K=4096,N=5120,dtype=fp16")  # 25 % more work


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", type=Path, help="keep the run directories here")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="compare-repeats-"))
    config = ef.RunSettings(trials=args.trials)
    dirs: dict[str, list[Path]] = {}
    for repeat in range(args.repeats):
        for name, spec in WORKLOADS.items():  # interleaved: drift over time hits every workload
            out = root / f"{name}-{repeat}"
            ef.run(spec, power=["nvml"], reporters=[], out=out, settings=config)
            dirs.setdefault(name, []).append(out)
    different = root / "different"
    ef.run(DIFFERENT[1], power=["nvml"], reporters=[], out=different, settings=config)

    report = {"repeats": args.repeats, "trials": args.trials, "workloads": {}}
    for name, paths in dirs.items():
        runs = [rundir.load(p, f"{name}-{i}") for i, p in enumerate(paths)]
        entry = {}
        for figure in ("time", "energy"):
            medians = []
            for run in runs:
                s = [x for x in run.result.primary_summaries() if x.channel][0]
                medians.append((s.time_per_iter_s if figure == "time" else s.energy_per_iter_j).median)
            flagged = {0.0: 0, 1.0: 0}
            pairs = list(itertools.combinations(runs, 2))
            for a, b in pairs:
                for floor in flagged:
                    c = compare_report.compare_runs(
                        [a, b], figures=(figure,), min_change_pct=floor, derived=False
                    )
                    flagged[floor] += sum(
                        1 for r in c.rows if r.changes[1] is not None and r.changes[1].significant
                    )
            entry[figure] = {
                "medians": medians,
                "spread_pct": 100 * (max(medians) / min(medians) - 1),
                "pairs": len(pairs),
                "significant_with_no_floor": flagged[0.0],
                "significant_with_1pct_floor": flagged[1.0],
            }
        report["workloads"][name] = entry
        print(
            f"{name}: spread of medians time {entry['time']['spread_pct']:.2f}%, energy "
            f"{entry['energy']['spread_pct']:.2f}%; pairs called significant (no floor / 1 %): time "
            f"{entry['time']['significant_with_no_floor']}/{entry['time']['pairs']} / "
            f"{entry['time']['significant_with_1pct_floor']}, energy "
            f"{entry['energy']['significant_with_no_floor']}/{entry['energy']['pairs']} / "
            f"{entry['energy']['significant_with_1pct_floor']}"
        )
    base = rundir.load(dirs[DIFFERENT[0]][0], "base")
    c = compare_report.compare_runs([base, rundir.load(different, "25% more work")], derived=False)
    report["different"] = [r.changes[1].verdict for r in c.rows if r.changes[1] is not None]
    print("a real change (N 4096 -> 5120):", "; ".join(report["different"]))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    print(f"runs in {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
