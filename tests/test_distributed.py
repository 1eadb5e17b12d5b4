"""Sharded scoring over 2 CPU processes equals a single process (timing aside)."""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from tiny_models import save_tiny, tiny_ids, tiny_model

from swapprune.engine.probing import score
from swapprune.engine.sharding import merge_results, merge_timing, score_sharded, shard_env

KWARGS = dict(
    pairs="all", protocols="replacement,interchange,deletion", batch_size=2, n_boot=100, seed=3
)
FAMILY = "qwen2"


def _ids():
    return tiny_ids(n=5, t=10, seed=1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, out: str, flag_dir: str, init: str) -> None:
    # Same environment torchrun gives a worker.
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)  # fixed reduction order, as in the reference run
    if init == "file":  # a caller that set up its own group before calling us
        import torch.distributed as dist

        dist.init_process_group(
            "gloo", init_method=f"file://{flag_dir}/rdzv", rank=rank, world_size=world
        )
    res = score_sharded(tiny_model(FAMILY), out=out, calibration=_ids(), progress=False, **KWARGS)
    Path(flag_dir, f"rank{rank}").write_text("none" if res is None else "result")


def _strip(d: dict) -> dict:
    d = dict(d)
    d.pop("timing", None)
    return d


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Identical per-window values need a fixed reduction order in every process
    (MKL may change its thread count under CPU contention)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def reference(one_thread) -> dict:
    return score(tiny_model(FAMILY), calibration=_ids(), progress=False, **KWARGS).to_dict()


@pytest.mark.parametrize("init", ["env", "file"])
@pytest.mark.slow
def test_two_processes_match_single_process(tmp_path, reference, init):
    out = tmp_path / "scores.json"
    mp.spawn(_worker, args=(2, _free_port(), str(out), str(tmp_path), init), nprocs=2, join=True)
    assert (tmp_path / "rank0").read_text() == "result"
    assert (tmp_path / "rank1").read_text() == "none"
    got = json.loads(out.read_text())
    assert _strip(got) == _strip(reference)  # pairs, per-window values, CIs, summary
    timing = got["timing"]
    assert timing["world_size"] == 2 and len(timing["rank_seconds"]) == 2
    assert timing["units_probed"] == 15 + 6  # all pairs of 6 blocks + 6 deletions
    assert not list(tmp_path.glob(".scores.json.*.tmp"))  # atomic write left no temp file


@pytest.mark.slow
def test_torchrun_subprocess(tmp_path, reference):
    """The real launcher: ``torchrun --nproc-per-node 2`` on a script calling score_sharded."""
    script = tmp_path / "job.py"
    tests = Path(__file__).resolve().parent
    script.write_text(
        "import sys, torch\n"
        f"sys.path.insert(0, {str(tests)!r})\n"
        "torch.set_num_threads(1)\n"
        "from tiny_models import tiny_model, tiny_ids\n"
        "from swapprune.engine.sharding import score_sharded\n"
        f"score_sharded(tiny_model({FAMILY!r}), out=sys.argv[1], calibration=tiny_ids(n=5, t=10, seed=1),\n"
        f"              progress=False, **{KWARGS!r})\n"
    )
    out = tmp_path / "scores.json"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(tests.parent))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(_free_port()),
            str(script),
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _strip(json.loads(out.read_text())) == _strip(reference)


def _per_window_bits(scores: dict) -> dict:
    """Every per-window value of a scores.json, as the bits of its float64 (NaN for gaps)."""
    out = {}
    for row in scores["pairs"]:
        for protocol in ("replacement", "interchange"):
            values = row[protocol]["per_window"]
            lists = values if protocol == "replacement" else [values]
            for k, v in enumerate(lists):
                key = (row["i"], row["j"], protocol, k)
                out[key] = np.array([math.nan if x is None else x for x in v]).view(np.uint64)
    for row in scores["deletion"]:
        v = row["per_window"]
        out[(row["layer"], "deletion")] = np.array([math.nan if x is None else x for x in v]).view(
            np.uint64
        )
    return out


@pytest.mark.slow
def test_torchrun_command_equals_one_process_bitwise(tmp_path):
    """The documented command, ``torchrun --nproc_per_node 2 -m swapprune score``, on a model
    directory: every per-window value has the bits of a single process's, and the rest of
    the file (CIs, summaries, meta) is equal apart from ``timing``."""
    model_dir = save_tiny(FAMILY, tmp_path / "model")
    args = [
        "score",
        "--model",
        str(model_dir),
        "--device",
        "cpu",
        "--prompts",
        "6",
        "--tokens",
        "12",
        "--batch-size",
        "2",
        "--pairs",
        "all",
        "--probes",
        "replacement,interchange,deletion",
        "--bootstrap",
        "50",
        "--no-progress",
    ]
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        PYTHONPATH=str(Path(__file__).resolve().parents[1]),
        SWAPPRUNE_TOKEN_CACHE="0",
    )
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    single = subprocess.run(
        [sys.executable, "-m", "swapprune", *args, "--output", str(one)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert single.returncode == 0, single.stderr[-3000:]
    launcher = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which(
        "torchrun"
    )
    if launcher is None:
        pytest.skip("no torchrun executable next to this python or on PATH")
    sharded = subprocess.run(
        [
            launcher,
            "--nproc_per_node",
            "2",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(_free_port()),
            "-m",
            "swapprune",
            *args,
            "--output",
            str(two),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert sharded.returncode == 0, sharded.stderr[-3000:]
    a, b = json.loads(one.read_text()), json.loads(two.read_text())
    assert b["timing"]["world_size"] == 2 and "world_size" not in a["timing"]
    bits_a, bits_b = _per_window_bits(a), _per_window_bits(b)
    assert len(bits_a) == 15 * 3 + 6  # all pairs of 6 blocks x 3 plans, + 6 deletions
    assert bits_a.keys() == bits_b.keys()
    for key in bits_a:
        assert np.array_equal(bits_a[key], bits_b[key]), key
    assert _strip(a) == _strip(b)


def test_no_torchrun_env_is_plain_score(tmp_path, monkeypatch, reference):
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    assert shard_env() == (0, 1, 0)
    out = tmp_path / "s.json"
    res = score_sharded(tiny_model(FAMILY), out=out, calibration=_ids(), progress=False, **KWARGS)
    assert _strip(res.to_dict()) == _strip(reference)
    assert _strip(json.loads(out.read_text())) == _strip(reference)


def test_merge_of_shards_in_one_process():
    """Shards scored one after another merge to the unsharded result."""
    model, ids = tiny_model("llama"), _ids()
    kw = dict(calibration=ids, progress=False, **KWARGS)
    parts = [score(model, shard=(r, 3), **kw) for r in range(3)]
    merged = merge_results(parts)
    assert _strip(merged.to_dict()) == _strip(score(model, **kw).to_dict())
    t = merged.meta["timing"]
    assert t["world_size"] == 3
    assert t["block_evals"] == sum(p.meta["timing"]["block_evals"] for p in parts)
    assert merge_timing([{"seconds": 1.0}, {"seconds": 2.5}])["seconds"] == 2.5


def test_mismatched_settings_are_refused():
    from swapprune.errors import SwappruneError

    model = tiny_model("llama")
    a = score(model, calibration=_ids(), progress=False, shard=(0, 2), **KWARGS)
    b = score(
        model, calibration=tiny_ids(n=5, t=10, seed=2), progress=False, shard=(1, 2), **KWARGS
    )
    with pytest.raises(SwappruneError, match="calibration"):
        merge_results([a, b])


def test_each_rank_loads_onto_its_own_gpu(monkeypatch):
    """``swapprune score --device cuda`` (or no --device) under torchrun: rank k gets cuda:k."""
    from swapprune.model.load import default_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    assert default_device(None) == default_device("cuda") == "cuda"
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert default_device(None) == default_device("auto") == default_device("cuda") == "cuda:3"
    assert default_device("cuda:0") == "cuda:0" and default_device("cpu") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert default_device(None) == default_device("auto") == "cpu"
