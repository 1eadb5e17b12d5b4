"""The plan's typed records: each round trips through its JSON form, plan.json files written
before the records were typed read into them (and write the same bytes), and the summary and
the card say the records' sentences alike."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from swapprune.errors import SwappruneError
from swapprune.plan import PrunePlan
from swapprune.records import (
    KEYS,
    AdaptiveRecord,
    AutoRecord,
    AutoSearch,
    BlockWork,
    CertificateSkipped,
    Compute,
    PlanRecords,
    RemovalOrder,
    ServeRecord,
    Stability,
)
from swapprune.select.certificate import Certificate

PLANS = Path(__file__).parent / "data" / "plans"


def stability(criterion: str = "interchange", frequency: float = 0.722) -> Stability:
    return Stability(
        chosen=[2, 4],
        frequency=frequency,
        inclusion=[0.049, 0.0, 0.722, 0.229, 0.771, 0.229],
        alternatives=[{"set": [3, 5], "frequency": 0.229}],
        windows=8,
        n_boot=1000,
        seed=3,
        criterion=criterion,
        strategy="greedy",
        budget=2,
        counts={(2, 4): 722, (3, 5): 229, (0, 4): 49},
    )


def certificate(**kw) -> Certificate:
    fields = dict(
        chosen=[2, 4], kept=[3, 5], switched=True, gain=2.3, r95=0.0, quantile=0.95, r_stop=0.0,
        sets=[{"set": [2, 4], "cost_points": 1.2},
              {"set": [3, 5], "cost_points": -1.1, "better_than_chosen_ci": [0.5, 3.7]}],
        p_within=1.0, delta=1.0, certified=True, mass_outside=0.0245, plausible_from="bootstrap",
        windows=4, tokens=252, n_boot=1000, seed=3,
        extra={"compute": {"block_evals": 9, "block_tokens": 2304}},
    )  # fmt: skip
    return Certificate(**(fields | kw))


def adaptive(**kw) -> AdaptiveRecord:
    rounds = [{"windows": 8, "pairs_probed": 5, "frequency": {"interchange": 1.0}}]
    return AdaptiveRecord("certified", 8, 40, 32, 0.11, 0.1, rounds, **kw)


def regime(call: str) -> dict:
    return {"call": call, "advice": "either protocol", "confidence": 1.0, "median_ir": 0.37,
            "median_replacement": 0.005, "median_interchange": 0.0018}  # fmt: skip


def search() -> AutoSearch:
    beam = {"calls": 7, "capped": True, "width": 3, "cap": 7, "cost": 0.41}
    return AutoSearch([1, 2, 3, 4], "swap", [2, 3], "ppl", beam, 0.12, 11, [6, 16])


def auto(**kw) -> AutoRecord:
    fields = dict(
        regime=regime("tie-like"), action="either protocol (tie-like regime): interchange-guided",
        selections={"replacement": [2, 4], "interchange": [2, 4]}, agree=True,
        stability={"replacement": stability("replacement"), "interchange": stability()},
        oracle_calls=0, windows=8, adaptive=adaptive(final_certified=True), chosen=[3, 5],
    )  # fmt: skip
    return AutoRecord(**(fields | kw))


def serve(chosen=(6, 7)) -> ServeRecord:
    return ServeRecord(
        runtimes=["llama.cpp", "transformers-gguf"],
        default=True,
        rules=["llama.cpp derives gemma3_text layer types from the index (every 6th layer full)"],
        eligible_sets=1,
        removal_sets=28,
        strategy_choice=[5, 7],
        chosen=list(chosen),
        strategy_importance=0.013607,
        chosen_importance=0.011768 if list(chosen) != [5, 7] else 0.013607,
    )


def compute() -> Compute:
    return Compute(probes=BlockWork(62, 15872), tiebreak=BlockWork(6, 1536),
                   certificate=BlockWork(9, 2304))  # fmt: skip


def every_record() -> PlanRecords:
    return PlanRecords(
        serve=serve(),
        order=RemovalOrder([4, 2, 5]),
        adaptive=adaptive(stability={"interchange": stability()}, stop_note="the loop ..."),
        certificate=certificate(),
        auto=auto(search=search(), regime=regime("both-high")),
        compute=compute(),
        stability=stability(),
    )


# -- each record round trips ----------------------------------------------------------------


@pytest.mark.parametrize(
    "record",
    [
        stability(),
        BlockWork(3, 96),
        compute(),
        adaptive(),
        adaptive(stability={"interchange": stability()}, final_certified=False, stop_note="x"),
        search(),
        auto(),
        auto(adaptive=None, search=search(), regime=regime("both-high")),
        serve(),
        serve(chosen=(5, 7)),
    ],
    ids=lambda r: type(r).__name__,
)
def test_a_record_reads_back_from_its_dict(record):
    again = type(record).from_dict(json.loads(json.dumps(record.to_dict())))
    assert again == record
    assert json.dumps(again.to_dict()) == json.dumps(record.to_dict())  # key order too


def test_the_certificate_and_its_skipped_form_round_trip_with_their_summary():
    cert = certificate()
    written = PlanRecords(certificate=cert).to_dict()["certificate"]
    assert list(written)[-2:] == ["compute", "summary"] and written["summary"] == cert.summary()
    again = Certificate.from_dict(written)
    assert again == cert and again.extra == {"compute": {"block_evals": 9, "block_tokens": 2304}}
    skipped = PlanRecords(certificate=CertificateSkipped("no held-out windows"))
    assert skipped.to_dict() == {
        "certificate": {"certified": None, "skipped": "no held-out windows"}
    }
    back, rest = PlanRecords.from_scores(skipped.to_dict())
    assert back == skipped and rest == {} and back.measured is None


def test_the_removal_order_is_a_list_in_json():
    order = RemovalOrder([4, 2, 5])
    assert order.to_list() == [4, 2, 5] and order.first(2) == [4, 2]
    assert RemovalOrder.from_list(order.to_list()) == order


def test_derived_fields_are_recomputed_not_read():
    d = stability(frequency=0.4).to_dict()
    assert d["stable"] is False
    d["stable"] = True  # a hand-edited flag does not survive: the frequency decides
    assert Stability.from_dict(d).to_dict()["stable"] is False
    c = compute().to_dict()
    assert c["total"] == {"block_evals": 77, "block_tokens": 19712}
    c["total"] = {"block_evals": 0, "block_tokens": 0}
    assert Compute.from_dict(c).total == BlockWork(77, 19712)


def test_every_record_round_trips_through_a_plan(tmp_path):
    plan = PrunePlan.from_removal(
        6, [2, 4], budget=2, protocol="interchange", strategy="greedy",
        scores={"importance": [0.1] * 6, "tiebreak": {"rule": "r", "values": [1.0] * 6},
                "oracle_calls": 3}, records=every_record(),
    )  # fmt: skip
    plan.to_json(tmp_path / "plan.json")
    again = PrunePlan.from_json(tmp_path / "plan.json")
    assert again == plan and again.records == every_record()
    assert again.scores == {"importance": [0.1] * 6, "tiebreak": plan.scores["tiebreak"],
                            "oracle_calls": 3}  # fmt: skip


# -- where plan.json keeps them --------------------------------------------------------------


def test_the_records_sit_among_the_scores_in_the_order_selection_writes_them():
    scores = {"importance": [0.1] * 6, "tiebreak": {"rule": "r", "values": [1.0] * 6},
              "selection": {"region": [1, 4]}, "oracle_calls": 3}  # fmt: skip
    keys = list(every_record().json_scores(scores))
    assert keys == ["importance", "serve", "tiebreak", "order", "selection", "oracle_calls",
                    "adaptive", "certificate", "auto", "compute", "stability"]  # fmt: skip
    # a certificate that was not measured is recorded after auto's decision
    late = PlanRecords(auto=auto(), certificate=CertificateSkipped("no held-out windows"))
    assert list(late.json_scores({"importance": []})) == ["importance", "auto", "certificate"]
    assert set(KEYS) == {k for k in keys if k not in scores}


def test_plan_scores_refuse_a_record_key_and_bad_records_are_one_line():
    with pytest.raises(SwappruneError, match="those are records"):
        PrunePlan.from_removal(4, [1], scores={"certificate": {"certified": True}})
    data = PrunePlan.from_removal(4, [1]).to_dict()
    data["scores"] = {"compute": {"probes": {"block_evals": 1}}}
    with pytest.raises(SwappruneError, match="malformed plan"):
        PrunePlan.from_dict(data)


def _holds(new, old) -> bool:
    """Whether ``new`` holds every value of ``old`` (dicts may have grown keys)."""
    if isinstance(old, dict):
        return isinstance(new, dict) and all(k in new and _holds(new[k], v) for k, v in old.items())
    return new == old


@pytest.mark.parametrize(
    ("name", "made"),
    [
        ("adaptive", {"adaptive", "certificate", "compute", "stability"}),
        ("auto", {"auto", "certificate", "compute"}),
        ("auto_both_high", {"auto", "certificate", "compute"}),
        ("serve", {"serve", "adaptive", "certificate", "compute", "stability"}),
        ("sleb", {"order", "certificate", "compute"}),
        ("skipped", {"certificate", "compute"}),
    ],
)
def test_plan_files_written_before_typed_records_read_into_them(tmp_path, name, made):
    path = PLANS / f"{name}.json"
    plan = PrunePlan.from_json(path)
    rec = plan.records
    assert {k for k in KEYS if getattr(rec, k) is not None} == made
    assert not set(plan.scores) & set(KEYS)
    plan.to_json(tmp_path / "again.json")
    again, before = json.loads((tmp_path / "again.json").read_text()), json.loads(path.read_text())
    # The certificate and the compute record have grown since these files were written (the
    # reference's sources and split, the reference's work); every value they held reads back
    # unchanged, the certificate's sentence aside (it is said anew from the record).
    grown = {"certificate", "compute"}
    for key in grown & set(before["scores"]):
        new, old = again["scores"].pop(key), before["scores"].pop(key)
        old.pop("summary", None), new.pop("summary", None)
        old.pop("total", None), new.pop("total", None)
        assert _holds(new, old), key
    # everything else: the same keys in the same order with the same values
    assert json.dumps(again) == json.dumps(before)


def test_what_the_old_files_hold_reads_as_typed_values():
    rec = PrunePlan.from_json(PLANS / "adaptive.json").records
    assert rec.adaptive.stopped == "certified" and rec.adaptive.final_certified is True
    assert rec.adaptive.stability["interchange"].chosen == [2, 4]
    assert rec.measured.certified and rec.stability.is_stable() and rec.tranches is rec.adaptive
    rec = PrunePlan.from_json(PLANS / "auto.json").records
    assert rec.auto.regime["call"] == "tie-like" and rec.auto.adaptive.stability is None
    assert rec.measured.switched and rec.auto.chosen == rec.measured.kept == [3, 5]
    assert rec.tranches is rec.auto.adaptive and rec.adaptive is None
    assert rec.compute.total == BlockWork(77, 19712)
    rec = PrunePlan.from_json(PLANS / "auto_both_high.json").records
    assert rec.auto.search.shortlist_source == "swap" and rec.auto.search.verified
    rec = PrunePlan.from_json(PLANS / "serve.json").records
    assert rec.serve.replaced and rec.serve.chosen == [6, 7]
    assert (
        rec.serve.summary()
        == json.loads((PLANS / "serve.json").read_text())["scores"]["serve"]["summary"]
    )
    sleb = PrunePlan.from_json(PLANS / "sleb.json")
    assert sleb.records.order.blocks == [3, 5] and sleb.removed == sleb.records.measured.kept
    assert isinstance(PrunePlan.from_json(PLANS / "skipped.json").records.certificate,
                      CertificateSkipped)  # fmt: skip


# -- the sentences the records say -----------------------------------------------------------


def test_the_records_sentences():
    assert compute().summary() == (
        "compute: 77 block evaluations [19,712 block-tokens]: probes 62 [15,872], "
        "tiebreak 6 [1,536], certificate 9 [2,304]"
    )
    assert Compute().summary() == "compute: 0 block evaluations [0 block-tokens]"
    assert adaptive().summary() == (
        "adaptive calibration: 8 windows, 1 round, 40 pair-window probes; stopped: certified"
    )
    assert serve(chosen=(5, 7)).summary() == (
        "serve: [5, 7] keeps llama.cpp, transformers-gguf in phase (1 of 28 removal sets of 2 are)"
    )
    assert "replaced by [6, 7]" in serve().summary() and "(0.01177 vs 0.01361" in serve().summary()
    lines = auto().lines()
    assert lines[1].startswith("action: either protocol") and lines[2] == (
        "tie-like regime: interchange [2, 4], replacement [2, 4] (same sets)"
    )
    high = auto(regime=regime("both-high"), search=search(), oracle_calls=8).lines()
    assert high[-1] == (
        "beam on held-out windows found [2, 3] from shortlist [1, 2, 3, 4] with 8 oracle "
        "calls (cap 7, reached; SLEB-iterative would use 11); kept [3, 5]"
    )
    control = auto(regime=regime("both-high"), search=AutoSearch(**{**vars(search()),
                   "shortlist_source": "bi"}))  # fmt: skip
    assert "from control shortlist (bi)" in control.lines()[-1]


def test_a_certified_cut_needs_no_stability_warning():
    shaky = stability(frequency=0.3)
    assert PlanRecords(stability=shaky).stability_warning() == shaky.warning() is not None
    certified = PlanRecords(stability=shaky, certificate=certificate())
    assert certified.stability_warning() is None
    refused = PlanRecords(stability=shaky, certificate=certificate(certified=False))
    assert refused.stability_warning() == shaky.warning()
    skipped = PlanRecords(stability=shaky, certificate=CertificateSkipped("no held-out windows"))
    assert skipped.stability_warning() == shaky.warning()


def _summary(plan: PrunePlan, tmp_path) -> str:
    from types import SimpleNamespace

    from swapprune.cli.summary import print_prune_summary
    from swapprune.config import ModelConfig, RunConfig, SelectConfig

    cfg = RunConfig(model=ModelConfig("m"), prune=SelectConfig(budget=2))
    res = SimpleNamespace(
        plan=plan, scores=None, metrics={}, config=cfg, output=tmp_path / "out", model=None
    )
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_prune_summary(res)
    return buf.getvalue()


def test_the_summary_and_the_card_say_the_records_alike(tmp_path):
    from swapprune.output.card import card_lines

    plan = PrunePlan.from_json(PLANS / "auto.json")
    said, card = _summary(plan, tmp_path), "\n".join(card_lines({}, plan))
    lines = plan.records.auto.lines()
    assert all(line in said.splitlines() for line in lines)
    assert "What `--protocol auto` decided: " + "; ".join(lines) + "." in card
    assert plan.records.measured.summary() in said.splitlines()
    assert plan.records.tranches.summary() in said and plan.records.compute.summary() in said
    assert "The criterion chose [2, 4]; [3, 5] was cheaper on the held-out windows by 2.30" in card
    assert plan.records.measured.paragraph() in card

    plan = PrunePlan.from_json(PLANS / "adaptive.json")
    said, card = _summary(plan, tmp_path), "\n".join(card_lines({}, plan))
    stab = plan.records.stability.summary()
    assert stab in said.splitlines() and "warning" not in said
    assert "How stable is the choice? The kept set [2, 4] comes out in 100%" in card

    plan = PrunePlan.from_json(PLANS / "serve.json")
    assert plan.records.serve.summary() in _summary(plan, tmp_path).splitlines()
    said = _summary(PrunePlan.from_json(PLANS / "skipped.json"), tmp_path)
    assert "certificate: not measured (no held-out windows)" in said


def test_an_uncertified_cut_says_its_fix_and_its_stability_warning(tmp_path):
    from swapprune.output.card import card_lines

    plan = PrunePlan.from_json(PLANS / "adaptive.json")
    plan.records.certificate = certificate(certified=False, switched=False, kept=[2, 4])
    plan.records.stability = stability(frequency=0.3)
    said = _summary(plan, tmp_path)
    assert "certificate: NOT certified" in said and said.count("next:") == 1
    assert "out-heldout8" in said and plan.records.stability.warning() in said
    card = "\n".join(card_lines({}, plan))
    assert "The cut is **not** certified" in card
    assert f"**{plan.records.stability.warning()}**" in card
