"""The report of a predictor-validity check: markdown table, plot, files."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from swapprune.output.artifacts import (
    save_figure,
    staging_dir,
    write_json_atomic,
    write_text_atomic,
)


def validity_markdown(result: dict) -> str:
    """The Spearman table, best first."""
    cal, tgt = result["calibration"], result["target"]
    lines = [
        "# Predictor validity",
        "",
        f"Spearman over {result['num_layers']} blocks between each criterion's removability and "
        f"the measured single-block deletion cost ({result['deletion_cost']['definition']}; "
        f"base PPL {result['deletion_cost']['base_ppl']:.3f} on the {tgt['prompts']} target "
        "windows).",
        f"Criteria on {cal['prompts']} x {cal['tokens']} windows of {cal['source']}; "
        f"target on {tgt['prompts']} x {tgt['tokens']} windows of {tgt['source']}"
        + (" (the same windows)." if result["target_is_calibration"] else "."),
        f"Window CI: {result['bootstrap']['resamples']} bootstrap resamples of windows, the "
        "blocks fixed (calibration noise only: it cannot rank criteria). Layer CI: the blocks "
        "resampled, one draw for every criterion (what a ranking of criteria needs).",
        "",
        "| criterion | Spearman | window 95% CI | layer 95% CI | windows resampled |",
        "|---|---:|---|---|---|",
    ]
    rows = sorted(
        result["criteria"].items(), key=lambda kv: -np.nan_to_num(kv[1]["spearman"], nan=-9)
    )
    for name, r in rows:
        layer = r.get("layer_ci")
        lci = f"[{layer[0]:+.2f}, {layer[1]:+.2f}]" if layer else "n/a"
        lines.append(
            f"| {name} | {r['spearman']:+.2f} | [{r['ci'][0]:+.2f}, {r['ci'][1]:+.2f}] "
            f"| {lci} | {r['resampled']} |"
        )
    diffs = (result.get("layer_bootstrap") or {}).get("differences") or {}
    if diffs:
        lines += ["", "Paired differences of Spearman under the layer bootstrap:", ""]
        for name, d in diffs.items():
            lines.append(
                f"- {name}: {d['estimate']:+.2f} [{d['ci'][0]:+.2f}, {d['ci'][1]:+.2f}], "
                f"p = {d['p_value']:.3g}"
                + (" (CI holds 0: not resolved)" if d["ci"][0] <= 0 <= d["ci"][1] else "")
            )
    return "\n".join(lines) + "\n"


def plot_validity(result: dict, path: str | Path) -> None:
    """Spearman with its CI per criterion, and the deletion cost per block (PNG)."""
    import matplotlib  # imports matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # imports matplotlib

    rows = sorted(
        result["criteria"].items(), key=lambda kv: np.nan_to_num(kv[1]["spearman"], nan=-9)
    )
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 0.35 * len(rows) + 2.5))
    y = np.arange(len(rows))
    rho = np.array([r["spearman"] for _, r in rows])
    lo = np.array([r["ci"][0] for _, r in rows])
    hi = np.array([r["ci"][1] for _, r in rows])
    a.errorbar(
        rho, y, xerr=[np.clip(rho - lo, 0, None), np.clip(hi - rho, 0, None)], fmt="o", capsize=3
    )
    a.axvline(0, color="grey", lw=0.8)
    a.set_yticks(y, [n for n, _ in rows])
    a.set_xlabel("Spearman(removability, deletion cost), 95% CI")
    cost = result["deletion_cost"]["per_layer"]
    b.bar(range(len(cost)), cost)
    b.set_yscale("symlog", linthresh=0.01)
    b.set_xlabel("block")
    b.set_ylabel("PPL increase when removed alone")
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)


def write_validity_report(result: dict, out_dir: str | Path) -> Path:
    """Write ``validity.json``, ``validity.md`` and ``validity.png`` into ``out_dir``
    (staged: the directory appears with all three, or not at all)."""
    out = Path(out_dir)
    with staging_dir(out) as tmp:
        write_json_atomic(tmp / "validity.json", result)
        write_text_atomic(tmp / "validity.md", validity_markdown(result))
        plot_validity(result, tmp / "validity.png")
    return out
