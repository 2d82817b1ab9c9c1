"""Resolve rate by model x stack domain x tier, as a PNG, from run folders (results.parquet).

python scripts/plot_resolve_rate.py data/runs/*/ --out resolve_rate.png
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd


def load_runs(run_dirs: list[Path]) -> pd.DataFrame:
    frames = [pd.read_parquet(d / "results.parquet") for d in run_dirs if (d / "results.parquet").exists()]
    if not frames:
        raise SystemExit("no results.parquet in the given folders")
    return pd.concat(frames, ignore_index=True)


def resolve_rate(df: pd.DataFrame) -> pd.DataFrame:
    """One row per model x stack_domain x contamination_tier: resolved, total, rate (infra failures kept in
    the denominator: the published score counts every instance)."""
    g = df.groupby(["model", "stack_domain", "contamination_tier"], observed=True)["resolved"]
    out = g.agg(resolved="sum", total="count").reset_index()
    out["rate"] = out["resolved"] / out["total"]
    return out


def plot(table: pd.DataFrame, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = table.assign(group=table["stack_domain"] + " / " + table["contamination_tier"])
    pivot = table.pivot_table(index="model", columns="group", values="rate", aggfunc="first").fillna(0.0)
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(pivot.columns) * len(pivot)), 4))
    pivot.plot.bar(ax=ax, rot=0)
    ax.set_ylim(0, 1)
    ax.set_ylabel("resolve rate")
    ax.set_title("PrototypeBench resolve rate by model × stack domain × tier")
    ax.legend(fontsize="small", loc="upper right")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=Path("resolve_rate.png"))
    args = parser.parse_args(argv)
    table = resolve_rate(load_runs(args.runs))
    print(table.to_string(index=False))
    print(f"chart: {plot(table, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
