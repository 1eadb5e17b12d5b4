"""Fuzzed inputs: every generated recipe, --set override, plan.json, scores.json and GGUF header
either works or is a one-line SwappruneError; never another exception, and nothing is written.

The fast profile runs ``FUZZ_EXAMPLES`` examples per target, the same ones on every run
(derandomized), so that a failure in CI is reproduced by running the suite again. The
environment variable ``SWAPPRUNE_FUZZ_EXAMPLES`` raises the count for a long run, which
draws new examples each time (that is how the fuzzers find new inputs).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from swapprune.config import RunConfig  # noqa: E402
from swapprune.engine.scores import ScoreResult  # noqa: E402
from swapprune.errors import SwappruneError  # noqa: E402
from swapprune.plan import PrunePlan  # noqa: E402
from swapprune.recipe import apply_override, load_config  # noqa: E402

FUZZ_EXAMPLES = int(os.environ.get("SWAPPRUNE_FUZZ_EXAMPLES", "60"))
FAST = settings(
    max_examples=FUZZ_EXAMPLES,
    derandomize="SWAPPRUNE_FUZZ_EXAMPLES" not in os.environ,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# Values of every kind a hand-edited file can hold.
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)

SECTIONS = [f.name for f in __import__("dataclasses").fields(RunConfig)]
KEYS = {
    "model": ["name", "dtype", "device", "device_map", "trust_remote_code"],
    "calibration": ["calib", "prompts", "tokens", "seed", "positions", "batch_size", "adaptive"],
    "prune": [
        "budget",
        "protocol",
        "strategy",
        "op",
        "merge",
        "protect_first",
        "patch",
        "certify_sets",
        "certify_delta",
        "heldout_prompts",
        "heldout_tokens",
    ],  # fmt: skip
    "score": ["probes", "pairs", "bootstrap", "cache_gb", "output"],
    "eval": ["tasks", "limit", "words", "max_length", "at"],
    "cost": ["windows", "threshold"],
    "export": ["output", "overwrite", "save_dtype"],
    "heal": ["rank", "steps", "lr", "dropout"],
}


def _section(name):
    keys = st.sampled_from(KEYS.get(name, ["x"]) + ["unknown_key"])
    return st.dictionaries(keys, VALUES, max_size=5)


RECIPES = st.dictionaries(
    st.sampled_from(SECTIONS + ["nonsense"]),
    st.one_of(VALUES, st.deferred(lambda: st.just({}))),
    max_size=4,
).flatmap(
    lambda d: st.fixed_dictionaries(
        {k: (_section(k) if k in KEYS else st.just(v)) for k, v in d.items()}
    )
)


def _no_files_written(root: Path, before: set) -> None:
    assert {p for p in root.rglob("*")} == before


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@FAST
@given(recipe=RECIPES)
def test_generated_recipes_load_or_fail_in_one_line(workdir, recipe):
    before = set(workdir.rglob("*"))
    try:
        load_config(None, data=recipe)
    except SwappruneError as e:
        assert "\n" not in str(e).strip()
    _no_files_written(workdir, before)


OVERRIDES = st.tuples(
    st.sampled_from([f"{s}.{k}" for s, ks in KEYS.items() for k in ks] + ["prune", "x.y.z", ""]),
    st.one_of(
        st.text(max_size=10),
        st.sampled_from(["3", "-1", "1e400", "nan", "[a, b]", "{x: 1}", "null", "true"]),
    ),
)


@FAST
@given(sets=st.lists(OVERRIDES, max_size=4))
def test_generated_overrides_apply_or_fail_in_one_line(workdir, sets):
    before = set(workdir.rglob("*"))
    data = {"prune": {"budget": 2}, "export": {"output": "out"}}
    try:
        for key, value in sets:
            apply_override(data, f"{key}={value}")
        load_config(None, data=data)
    except SwappruneError as e:
        assert "\n" not in str(e).strip()
    _no_files_written(workdir, before)


PLAN_KEYS = ["num_layers", "kept", "removed", "merged", "op", "merge", "budget", "protocol",
             "strategy", "scores", "model", "fingerprint", "patch", "extra"]  # fmt: skip
PLANS = st.dictionaries(
    st.sampled_from(PLAN_KEYS),
    st.one_of(
        VALUES,
        st.lists(st.integers(min_value=-3, max_value=40), max_size=8),
        st.integers(min_value=-2, max_value=40),
    ),
    max_size=8,
)


@FAST
@given(doc=PLANS)
def test_generated_plans_load_or_fail_in_one_line(doc):
    try:
        plan = PrunePlan.from_dict(doc)
    except SwappruneError as e:
        assert "\n" not in str(e).strip()
        return
    assert sorted(plan.kept + plan.removed) == list(range(plan.num_layers))


def _pair_row():
    windows = st.lists(
        st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)), max_size=5
    )
    return st.fixed_dictionaries(
        {},
        optional={
            "i": st.one_of(st.integers(-2, 40), VALUES),
            "j": st.one_of(st.integers(-2, 40), VALUES),
            "replacement": st.one_of(
                VALUES, st.fixed_dictionaries({"per_window": st.lists(windows, max_size=3)})
            ),
            "interchange": st.one_of(VALUES, st.fixed_dictionaries({"per_window": windows})),
        },
    )


SCORES = st.fixed_dictionaries(
    {"schema": st.sampled_from(["swapprune.scores/1", "other/1"])},
    optional={
        "num_layers": st.one_of(st.integers(-1, 40), VALUES),
        "bootstrap": st.one_of(
            VALUES,
            st.fixed_dictionaries({"resamples": st.integers(-5, 2000), "seed": st.integers(-5, 5)}),
        ),
        "pairs": st.one_of(VALUES, st.lists(_pair_row(), max_size=4)),
        "deletion": st.one_of(
            VALUES,
            st.lists(st.fixed_dictionaries({"layer": VALUES, "per_window": VALUES}), max_size=3),
        ),
    },
)


@FAST
@given(doc=SCORES)
def test_generated_scores_load_or_fail_in_one_line(doc):
    try:
        res = ScoreResult.from_dict(doc)
    except SwappruneError as e:
        assert "\n" not in str(e).strip()
        return
    for (i, j), v in res.pairs.items():
        assert isinstance(i, int) and isinstance(j, int)
        for x in v.values():
            assert x.dtype.kind == "f"
    assert res.n_boot >= 1 and math.isfinite(res.n_boot)


@pytest.fixture(scope="module")
def gguf_bytes(tmp_path_factory):
    from test_gguf_cache import write_tiny_gguf

    return write_tiny_gguf(tmp_path_factory.mktemp("g") / "t.gguf").read_bytes()


@FAST
@given(data=st.data())
def test_damaged_gguf_headers_fail_in_one_line(tmp_path, gguf_bytes, data):
    from swapprune.model.facts import from_gguf_header

    raw = bytearray(gguf_bytes)
    mode = data.draw(st.sampled_from(["truncate", "flip"]))
    if mode == "truncate":
        raw = raw[: data.draw(st.integers(0, min(len(raw), 4000)))]
    else:
        for _ in range(data.draw(st.integers(1, 8))):
            at = data.draw(st.integers(0, min(len(raw), 3000) - 1))
            raw[at] ^= 1 << data.draw(st.integers(0, 7))
    path = tmp_path / "damaged.gguf"
    path.write_bytes(bytes(raw))
    try:
        facts = from_gguf_header(path)
    except SwappruneError as e:
        assert "\n" not in str(e).strip()
        return
    assert facts.num_layers >= 0


@pytest.mark.parametrize("field", ["n_kv", "n_tensors", "array"])
def test_a_header_claiming_more_than_the_file_holds_is_refused_before_parsing(tmp_path, field):
    """A damaged count must not make the reader build one object per claimed element."""
    import gguf
    from tiny_gguf import write_tiny_gguf

    from swapprune.model.facts import from_gguf_header

    path = write_tiny_gguf(tmp_path / "t.gguf", "llama", 4)
    raw = bytearray(path.read_bytes())
    if field == "n_kv":
        raw[16:24] = (2**40).to_bytes(8, "little")
    elif field == "n_tensors":
        raw[8:16] = (2**40).to_bytes(8, "little")
    else:  # the element count of the token-type array (int32 values)
        f = gguf.GGUFReader(path, "r").fields["tokenizer.ggml.token_type"]
        at = f.offset + 8 + len("tokenizer.ggml.token_type") + 4 + 4
        assert int.from_bytes(raw[at : at + 8], "little") == len(f.data)
        raw[at : at + 8] = (2**40).to_bytes(8, "little")
    path.write_bytes(bytes(raw))
    with pytest.raises(SwappruneError) as e:
        from_gguf_header(path)
    message = str(e.value)
    assert message.startswith(f"cannot read GGUF file {path}: ") and "\n" not in message
    assert message.count("cannot read GGUF file") == 1


@pytest.mark.parametrize("data", [{"export": {"output": "\x00"}}, {"model": {"name": "a\x00b"}}])
def test_a_nul_byte_in_a_recipe_value_is_one_line(data):
    """Found by the override fuzzer: a NUL in a path made pathlib raise ValueError."""
    from swapprune.recipe import load_config

    with pytest.raises(SwappruneError, match="contains a NUL byte"):
        load_config(None, data=data)
