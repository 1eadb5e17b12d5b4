"""Does bf16 screening rank removal sets as float32 does? Two landscapes on the same windows.

    PYTHONPATH=. python eval/landscape/bf16_agreement.py eval/landscape/smollm2-n2-fp32-screening.json \
        eval/landscape/smollm2-n2-bf16-screening.json

Prints (and writes next to this file as bf16_agreement.json) the Spearman correlation of
the first screening round's costs over all sets, the overlap of the two top-20s, whether
the survivors of each round and the best refined set are the same.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from swapprune.select.landscape import costs_points, parse_key, spearman
from swapprune.studies.landscape_report import arrays


def round_costs(state: dict, r: int) -> dict:
    rec = state["rounds"][r]
    return costs_points(arrays(rec), np.array(rec["base"]), np.array(rec["tokens"]))


def agreement(fp32: dict, bf16: dict) -> dict:
    assert fp32["windows"]["rounds"] == bf16["windows"]["rounds"], "not the same windows"
    a, b = round_costs(fp32, 0), round_costs(bf16, 0)
    sets = [parse_key(",".join(map(str, x["set"]))) for x in fp32["result"]["sets"]]
    top_a = sorted(sets, key=lambda s: (a[s], s))[:20]
    top_b = sorted(sets, key=lambda s: (b[s], s))[:20]
    best = [s["result"]["refined"][0] for s in (fp32, bf16)]
    return {
        "sets": len(sets),
        "spearman_round0": spearman([a[s] for s in sets], [b[s] for s in sets]),
        "top20_overlap_round0": len(set(top_a) & set(top_b)),
        "top20_same_order": top_a == top_b,
        "median_relative_diff_round0": float(
            np.median([abs(a[s] - b[s]) / abs(a[s]) for s in sets])
        ),
        "max_abs_diff_points_round0_top20": max(abs(a[s] - b[s]) for s in top_a),
        "survivors_same": [
            fp32["rounds"][r]["kept"] == bf16["rounds"][r]["kept"]
            for r in range(len(fp32["rounds"]))
        ],
        "best_refined": {"fp32": best[0]["set"], "bf16": best[1]["set"]},
        "best_same": best[0]["set"] == best[1]["set"],
        "cpu_s": {
            "fp32": {k: round(v["cpu_s"]) for k, v in fp32["compute"].items()},
            "bf16": {k: round(v["cpu_s"]) for k, v in bf16["compute"].items()},
        },
    }


if __name__ == "__main__":
    fp32, bf16 = (json.loads(Path(p).read_text()) for p in sys.argv[1:3])
    out = agreement(fp32, bf16)
    print(json.dumps(out, indent=1))
    (Path(__file__).parent / "bf16_agreement.json").write_text(json.dumps(out, indent=1) + "\n")
