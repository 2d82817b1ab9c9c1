"""What `pbench report --chart DIR` and `--html DIR` write from run folders: resolve-rate charts (per model, split
by before/after the model's cutoff and by stack domain; a models × instances grid) and a static leaderboard page
(models × domains × tiers with each model's cutoff, each run's score with its 95 % interval, the charts, links to
every verdict's trace)."""

from __future__ import annotations

import html
import os
from pathlib import Path

import pandas as pd

from tasks_lib.judge.reporting import run_scores, score_text

# Grid colours by verdict kind: resolved, the model's failure, the harness's, no prediction.
KIND_COLOURS = {"resolved": "#2e7d32", "failed": "#c62828", "errored": "#f9a825", "no_prediction": "#9e9e9e"}


def _kind(row) -> str:
    if row["resolved"]:
        return "resolved"
    if row["status"] == "no_prediction":
        return "no_prediction"
    return "errored" if row["infra_failure"] else "failed"


def rates(df: pd.DataFrame, by: str) -> pd.DataFrame:
    """Resolve rate per model and `by` (every selected instance in the denominator)."""
    g = df.groupby(["model", by], observed=True)["resolved"].agg(resolved="sum", total="count").reset_index()
    g["rate"] = g["resolved"] / g["total"]
    return g


def _cutoff_label(df: pd.DataFrame) -> pd.Series:
    return df["after_model_cutoff"].map({True: "after cutoff", False: "before cutoff"})


def write_charts(df: pd.DataFrame, out_dir: Path) -> list[Path]:
    """rates.png (per model: before/after cutoff, by domain) and grid.png (models × instances)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    out_dir.mkdir(parents=True, exist_ok=True)
    df = df.assign(cutoff=_cutoff_label(df))
    models = sorted(df["model"].unique())

    fig = Figure(figsize=(max(8, 2.2 * len(models) + 4), 4.6), dpi=110)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2, sharey=True)
    for ax, by, title in (
        (axes[0], "cutoff", "by the model's cutoff"),
        (axes[1], "stack_domain", "by stack domain"),
    ):
        table = rates(df, by).pivot_table(index="model", columns=by, values="rate", aggfunc="first")
        groups = list(table.columns)
        width = 0.8 / max(1, len(groups))
        for j, group in enumerate(groups):
            xs = [i + (j - (len(groups) - 1) / 2) * width for i in range(len(table.index))]
            bars = ax.bar(xs, table[group].fillna(0.0), width=width, label=str(group))
            ax.bar_label(bars, labels=[f"{v:.0%}" if v == v else "" for v in table[group]], fontsize=7)
        ax.set_xticks(range(len(table.index)), list(table.index), rotation=15, ha="right")
        ax.set_ylim(0, 1.08)
        ax.set_title(f"Resolve rate {title}")
        ax.legend(fontsize="small")
    axes[0].set_ylabel("resolved / instances")
    fig.tight_layout()
    rates_png = out_dir / "rates.png"
    fig.savefig(rates_png, format="png")

    instances = sorted(df["instance_id"].unique(), key=_by_number)
    kinds = {(r["model"], r["instance_id"]): _kind(r) for _, r in df.iterrows()}
    fig = Figure(figsize=(max(6, 0.35 * len(instances) + 3), max(2.5, 0.45 * len(models) + 1.8)), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for y, model in enumerate(models):
        for x, iid in enumerate(instances):
            kind = kinds.get((model, iid))
            colour = KIND_COLOURS.get(kind, "#ffffff")
            ax.add_patch(_cell(x, y, colour))
    ax.set_xlim(0, len(instances))
    ax.set_ylim(0, len(models))
    ax.set_xticks(
        [x + 0.5 for x in range(len(instances))], [i.rsplit("-", 1)[-1] for i in instances], fontsize=7
    )
    ax.set_yticks([y + 0.5 for y in range(len(models))], models)
    ax.set_xlabel("instance (PR number)")
    ax.set_title("Models × instances")
    ax.legend(
        handles=[Patch(color=c, label=k.replace("_", " ")) for k, c in KIND_COLOURS.items()],
        fontsize="small",
        loc="upper center",
        bbox_to_anchor=(0.5, -0.25),
        ncol=4,
    )
    fig.tight_layout()
    grid_png = out_dir / "grid.png"
    fig.savefig(grid_png, format="png")
    return [rates_png, grid_png]


def _by_number(iid: str) -> tuple[str, int]:
    repo, _, number = iid.rpartition("-")
    return (repo, int(number)) if number.isdigit() else (iid, 0)


def _cell(x: int, y: int, colour: str):
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), 1, 1, facecolor=colour, edgecolor="white", linewidth=1.5)


def _table(df: pd.DataFrame, by: str) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for _, r in rates(df, by).iterrows():
        out.setdefault(r["model"], {})[str(r[by])] = f"{int(r['resolved'])}/{int(r['total'])}"
    return out


def write_html(df: pd.DataFrame, out_dir: Path) -> Path:
    """index.html: the leaderboard (models × domains × tiers, each model's cutoff), the charts, every verdict
    linked to its trace folder. Static: no script, no network."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_charts(df, out_dir)
    esc = html.escape
    models = sorted(df["model"].unique())
    domains = sorted(df["stack_domain"].unique())
    tiers = sorted(df["contamination_tier"].unique())
    by_domain, by_tier = _table(df, "stack_domain"), _table(df, "contamination_tier")
    head = "".join(
        f"<th>{esc(c)}</th>" for c in ["model", "cutoff", "score", *domains, *(f"tier {t}" for t in tiers)]
    )
    rows = []
    for model in models:
        g = df[df["model"] == model]
        cutoff = str(g["model_cutoff"].iloc[0])
        cells = [f"{int(g['resolved'].sum())}/{len(g)} ({g['resolved'].mean():.0%})"]
        cells += [by_domain[model].get(d, "—") for d in domains] + [by_tier[model].get(t, "—") for t in tiers]
        rows.append(
            f"<tr><td>{esc(model)}</td><td>{esc(cutoff)}</td>"
            + "".join(f"<td>{esc(c)}</td>" for c in cells)
            + "</tr>"
        )
    runs = [
        f"<tr><td>{esc(r['run_id'])}</td><td>{esc(r['model'])}</td><td>{esc(score_text(r))}</td></tr>"
        for r in run_scores(df)
    ]
    verdicts = []
    for _, r in df.sort_values(["model", "instance_id"]).iterrows():
        trace = r["trace_dir"] or ""
        link = (
            f'<a href="{esc(os.path.relpath(trace, out_dir))}">trace</a>'
            if trace and Path(trace).exists()
            else "—"
        )
        verdicts.append(
            f'<tr class="{_kind(r)}"><td>{esc(r["model"])}</td><td>{esc(r["instance_id"])}</td>'
            f"<td>{esc(r['stack_domain'])}</td><td>{esc(r['status'])}</td><td>{link}</td></tr>"
        )
    colours = "".join(f"tr.{k} td:nth-child(4){{color:{c};font-weight:600}}" for k, c in KIND_COLOURS.items())
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>PrototypeBench leaderboard</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1200px}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:4px 10px;text-align:left}}th{{background:#eee}}{colours}
img{{max-width:100%;border:1px solid #ddd;margin:0.5em 0}}</style></head>
<body><h1>PrototypeBench leaderboard</h1>
<p>{len(models)} model(s), {df["instance_id"].nunique()} instance(s), {len(df)} verdict(s). Score = resolved / selected
instances (a missing prediction counts, unresolved). A model's cutoff is its disclosed training cutoff: "after
cutoff" instances were merged later.</p>
<table id="leaderboard"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>
<p>Each run's score with its 95 % Wilson interval: on ~100 instances a few points between two runs lie within
it (<code>pbench compare RUN_A RUN_B</code> tests the difference instance by instance).</p>
<table id="runs"><thead><tr><th>run</th><th>model</th><th>score (95 % interval)</th></tr></thead>
<tbody>{"".join(runs)}</tbody></table>
<h2>Charts</h2><img src="rates.png" alt="resolve rate per model"><img src="grid.png" alt="models x instances">
<h2>Verdicts</h2><table id="verdicts"><thead><tr><th>model</th><th>instance</th><th>domain</th><th>status</th>
<th>trace</th></tr></thead><tbody>{"".join(verdicts)}</tbody></table>
</body></html>
"""
    path = out_dir / "index.html"
    path.write_text(page)
    return path
