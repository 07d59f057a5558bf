"""The disaggregation verdict is like for like: the cheapest aggregated and the cheapest disaggregated layout that
meet the same targets, each searched under its own bound; a target neither layout is near leaves the verdict as it
was, and a looser question never finds either mode dearer than a tighter one does."""

import pytest

from core.decision import Constraints, ServingGoal, decode_batches, recommend

#: The default request (4,096 prompt + 4,096 output tokens) at 5 requests/s on MI325X in FP8, TTFT <= 2 s: the case
#: where without an ITL target the verdict read "cheapest disaggregated +50 %" ($40.95/h, decode pools at a batch cap
#: of 256 on TP 2) while the 40 ms question found a $33.15/h disaggregated layout (decode batch cap 65 on TP 1) that
#: meets the looser question too.
GOAL = ServingGoal(rate_per_s=5, p95_ttft_s=2.0)
CONS = Constraints(gpus_allowed=("mi325x",), weights_allowed=("fp8",), kv_allowed=("fp8",))


def _goal(itl_s):
    return ServingGoal(
        rate_per_s=5, p95_ttft_s=2.0, p95_itl_s=itl_s, workload=GOAL.workload.with_(num_requests=600, rate_per_s=5)
    )


def cheapest(r, mode):
    """The cheapest simulated layout of ``mode`` that meets the targets [USD/h] (inf when none)."""
    return min((c.cost for c in r.candidates if c.simulated and c.meets and c.mode == mode), default=float("inf"))


@pytest.fixture(scope="module")
def loose():
    return recommend(_goal(None), CONS)


def test_decode_batches_are_the_same_halvings_for_every_target():
    # cap 256: no target -> 256 and its halvings down to 16; a target allowing 65 -> 65, then 64, 32, 16
    assert decode_batches(256, 256) == (256, 128, 64, 32, 16)
    assert decode_batches(65, 256) == (65, 64, 32, 16)
    assert decode_batches(0, 256) == ()
    # nested: a tighter target's batches (its own bound aside) are all offered to a looser one
    for tight in range(1, 257):
        assert set(decode_batches(tight, 256)[1:]) <= set(decode_batches(256, 256))


def test_a_target_no_cheapest_layout_is_near_leaves_the_verdict_unchanged(loose):
    agg, dis = cheapest(loose, "aggregated"), cheapest(loose, "disaggregated")
    assert agg < float("inf") and dis < float("inf")  # both modes searched to a layout that meets
    itl = max(c.p95_itl_s for c in loose.candidates if c.simulated and c.meets and c.cost in (agg, dis))
    far = recommend(_goal(10 * itl), CONS)  # ten times the slower of the two cheapest layouts' p95 ITL
    assert far.explanation.disaggregation == loose.explanation.disaggregation
    assert far.recommendation.label == loose.recommendation.label
    assert (cheapest(far, "aggregated"), cheapest(far, "disaggregated")) == (agg, dis)


def test_a_looser_question_never_finds_a_mode_dearer(loose):
    tight = recommend(_goal(0.04), CONS)
    for mode in ("aggregated", "disaggregated"):
        assert cheapest(loose, mode) <= cheapest(tight, mode), mode
    # the verdict names the other mode's cheapest that meets the same targets, with its own cost
    text = loose.explanation.disaggregation
    other = "disaggregated" if loose.recommendation.mode == "aggregated" else "aggregated"
    assert f"${cheapest(loose, other):,.2f}/h" in text


def test_the_optimizer_page_says_the_same_verdict_with_a_far_itl_target(clear_cache):
    """The Optimizer page's "Disaggregated or not" line is the same with no ITL target and with one of 1 s, far above
    both cheapest layouts' p95 ITL (29 ms aggregated, 25-35 ms disaggregated in the core tests above)."""
    from test_range_pages_store import _app

    query = {
        "workload.rate_per_s": "5",
        "targets.gpus_allowed": "mi325x",
        "targets.weights_allowed": "fp8",
        "targets.kv_allowed": "fp8",
        "targets.requests_per_simulation": "600",
    }
    said = []
    for itl in ("none", "1"):
        at = _app("optimizer.py", **query, **{"targets.p95_itl_s": itl})
        line = [m.value for m in at.markdown if "**Disaggregated or not:**" in m.value]
        assert len(line) == 1, [m.value for m in at.markdown][:10]
        said.append(line[0])
    assert said[0] == said[1] and "Aggregated wins" in said[0]
