"""The published runs of references/ against both compute models: the per-operation model (the
default, cluster.compute_model = "op") and the flat fraction of peak ("flat"). A test set: this only
prints how far each lands; nothing is fitted.

    python bench/references_compute_models.py
"""

from __future__ import annotations

from pathlib import Path

from zerosim.calibration.references import references_report

REFERENCES = Path(__file__).resolve().parents[1] / "references"
MODELS = {"flat (0.5 of peak)": {"cluster": {"compute_model": "flat"}},
          "op by op (the default)": {"cluster": {"compute_model": "op"}}}


def main() -> None:
    reports = {name: references_report(REFERENCES, overrides)
               for name, overrides in MODELS.items()}
    names = list(reports)
    rows = {name: {(r["reference"], r["category"]): r for r in report["rows"]}
            for name, report in reports.items()}
    keys = sorted(rows[names[0]])
    width = max(len("reference"), *(len(key[0]) for key in keys))
    print(f"{'reference':<{width}} {'metric':<14} {'measured':>10} " +
          " ".join(f"{name:>20}" for name in names))
    for key in keys:
        first = rows[names[0]][key]
        cells = [f"{rows[n][key]['simulated']:>10.4g} ({rows[n][key]['error_pct']:+5.1f}%)"
                 for n in names]
        print(f"{key[0]:<{width}} {key[1]:<14} {first['measured']:>10.4g} " +
              " ".join(f"{c:>20}" for c in cells))
    for name, report in reports.items():
        for category, stats in report["summary"].items():
            if stats["count"]:
                print(f"{name}: {category} mean |error| {stats['mean_abs_error_pct']:.1f}% over "
                      f"{stats['count']}, worst {stats['worst_abs_error_pct']:.1f}%")


if __name__ == "__main__":
    main()
