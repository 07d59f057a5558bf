"""Golden outputs: the README's example commands and a few core figures, frozen.

Each README ``rabit ... --json`` example and each core figure below was recorded from the code as it stood
when the files under ``tests/golden/`` were written; a refactor must reproduce what a person reads: the same
keys, the same strings, integers and booleans exactly, and every float within a relative 1e-12 of the frozen
one. Not byte for byte: a fresh install resolves newer numeric libraries (numpy, scipy), whose sums and
transcendental functions may differ in the last bit, and a figure such as 1743186.7534314801 then prints as
...4804 (a relative 2e-16) with nothing changed in the code. A real change of a figure moves it by far more
than 1e-12. Byte-identical output is still required where it is a property of the code: the same command run
twice in one process (``test_readme_command_is_deterministic_in_one_process``). The only keys ignored are
those of the uncertainty bands added on top of the point estimates (``ranges``, ``range_basis`` and the
verdicts read from them). A deliberate change of a figure rewrites the file with
``RABIT_WRITE_GOLDEN=1 pytest tests/test_golden.py`` and says why in the commit.

The core figures pass every field they depend on explicitly, so a change of a default does not move them.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
from pathlib import Path

import pytest

from cli.main import main

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "golden"
WRITE = os.environ.get("RABIT_WRITE_GOLDEN") == "1"
IGNORED = {
    "ranges",
    "range_basis",
    "bound_inside_range",
    "misses_at_pessimistic_bound",
    "runner_up",
    "settled",
    "settled_by",
    "range_note",
}


def readme_commands() -> list[str]:
    """The ``rabit`` lines of the README's "Command line" block, continuation lines joined, comments cut."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Command line", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    joined = re.sub(r"\\\n\s*", "", block)
    out = []
    for line in joined.splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("rabit "):
            out.append(line)
    return out


def _strip(x):
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if k not in IGNORED}
    if isinstance(x, list):
        return [_strip(v) for v in x]
    return x


def _canonical(obj) -> str:
    return json.dumps(_strip(obj), indent=1) + "\n"


def _name(cmd: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", cmd.removeprefix("rabit ").lower()).strip("-")[:120]


#: How far a float may sit from its frozen value, relative: a few hundred ulps of a double (2.2e-16 each), room for
#: a library's last-bit difference summed over a chain of operations, and far below any digit a page or the CLI
#: shows (at most 6 significant digits).
REL_TOL = 1e-12


def differences(got, want, where: str = "$") -> list[str]:
    """Where ``got`` differs from ``want`` (both parsed JSON): floats beyond :data:`REL_TOL` relative, anything else
    (keys, strings, integers, booleans, None, list lengths) not exactly equal. Empty when they agree."""
    if (
        isinstance(want, bool)
        or isinstance(got, bool)
        or not (isinstance(want, (int, float)) and isinstance(got, (int, float)))
    ):
        if type(got) is not type(want):
            return [f"{where}: {got!r} ({type(got).__name__}) against {want!r} ({type(want).__name__})"]
        if isinstance(want, dict):
            out = [f"{where}: keys {sorted(set(got) ^ set(want))} in one only"] if set(got) != set(want) else []
            for k in want:
                if k in got:
                    out += differences(got[k], want[k], f"{where}.{k}")
            return out
        if isinstance(want, list):
            if len(got) != len(want):
                return [f"{where}: {len(got)} items against {len(want)}"]
            return [
                d for i, (g, w) in enumerate(zip(got, want, strict=True)) for d in differences(g, w, f"{where}[{i}]")
            ]
        return [] if got == want else [f"{where}: {got!r} against {want!r}"]
    if isinstance(want, int) and isinstance(got, int):
        return [] if got == want else [f"{where}: {got} against {want}"]
    if type(got) is not type(want):  # 3 against 3.0: a count became a measure, or the other way
        return [f"{where}: {got!r} ({type(got).__name__}) against {want!r} ({type(want).__name__})"]
    if math.isnan(want) or math.isinf(want):
        return [] if repr(got) == repr(want) else [f"{where}: {got!r} against {want!r}"]
    if math.isclose(got, want, rel_tol=REL_TOL, abs_tol=0.0):
        return []
    return [f"{where}: {got!r} against {want!r} (relative {abs(got - want) / max(abs(want), 1e-300):.1e})"]


def _check(name: str, obj) -> None:
    path = GOLDEN / f"{name}.json"
    text = _canonical(obj)
    if WRITE:
        path.write_text(text)
        return
    assert path.exists(), f"no golden file {path.name}; write it with RABIT_WRITE_GOLDEN=1"
    found = differences(json.loads(text), json.loads(path.read_text()))
    assert found == [], f"{path.name} differs from the frozen output:\n" + "\n".join(found[:20])


#: The subcommands whose README examples were frozen; later README examples (next-experiment, diagnose, the
#: store and calibration commands) need files or a store and are covered by their own tests.
FROZEN = ("memory", "speed", "simulate", "train", "recommend", "models", "gpus")
COMMANDS = [
    c
    for c in readme_commands()
    if c.split()[1] in FROZEN
    and "--assume" not in c
    and "--config" not in c
    and "--analysis" not in c
    and "--emit" not in c
]


def test_the_comparison_reads_like_a_person():
    # the README golden that moved on a fresh install: 1743186.7534314801 against ...4804 is 3 ulps apart (relative
    # 1.7e-16) and passes; a figure moved in its 11th significant digit (relative 1e-11) does not
    frozen = {"cost_usd": 1743186.7534314801, "gpus": 1024, "layout": "8,4,32", "ok": True, "p95": [0.5, None]}
    assert differences({**frozen, "cost_usd": 1743186.7534314804}, frozen) == []
    assert differences({**frozen, "cost_usd": 1743186.7534314801 * (1 + 1e-11)}, frozen) != []
    assert differences({**frozen, "gpus": 1025}, frozen) != []
    assert differences({**frozen, "gpus": 1024.0}, frozen) != []  # a count printed as a measure
    assert differences({**frozen, "layout": "8,4,16"}, frozen) != []
    assert differences({**frozen, "ok": 1}, frozen) != []
    assert differences({**frozen, "p95": [0.5]}, frozen) != []
    assert differences({**frozen, "p95": [0.5, 0.0]}, frozen) != []
    assert differences({k: v for k, v in frozen.items() if k != "ok"}, frozen) != []
    assert differences({**frozen, "extra": 1}, frozen) != []
    assert differences(float("nan"), float("nan")) == [] and differences(float("inf"), 1e308) != []


def test_readme_has_the_examples():
    # memory x3, speed, simulate, train x2, recommend x2, models, gpus
    assert len(COMMANDS) >= 11  # every README example has its golden file (the next test fails on a missing one)


@pytest.mark.parametrize("cmd", COMMANDS, ids=[_name(c) for c in COMMANDS])
def test_readme_command_json_is_frozen(cmd, capsys):
    argv = _readme_argv(cmd)
    missing = [a for a in argv if a.endswith((".txt", ".csv", ".jsonl")) and not (ROOT / a).exists()]
    if missing:
        pytest.skip(f"the example reads {missing[0]}, a file of the user's")
    assert main(argv) == 0
    _check("cli-" + _name(cmd), json.loads(capsys.readouterr().out))


def _readme_argv(cmd: str) -> list[str]:
    argv = shlex.split(cmd)[1:]
    argv = [str(GOLDEN / "my-llama.json") if a == "path/to/config.json" else a for a in argv]
    return argv if "--json" in argv else [*argv, "--json"]


#: The README examples run twice in one process: the training plans and the recommendation of training (the three
#: whose last float digits moved on a fresh install) and the 1,000-request simulation.
TWICE = [c for c in COMMANDS if c.split()[1] == "train" or "--train" in c or "--requests 1000 " in c]


@pytest.mark.parametrize("cmd", TWICE, ids=[_name(c) for c in TWICE])
def test_readme_command_is_deterministic_in_one_process(cmd, capsys):
    """The same command twice in one process prints the same bytes: no hidden state, clock or unseeded randomness
    reaches a figure (the tolerance above is for another install's libraries, not for this)."""
    argv = _readme_argv(cmd)
    if any(a.endswith((".txt", ".csv", ".jsonl")) and not (ROOT / a).exists() for a in argv):
        pytest.skip("the example reads a file of the user's")
    outs = []
    for _ in range(2):
        assert main(list(argv)) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1]


# --- core figures ------------------------------------------------------------------------------------


def _serving_cfg():
    from core.config import RabitConfig

    return RabitConfig(
        model="llama-3.1-70b",
        gpu="h100-sxm",
        gpus_per_node=8,
        nodes=1,
        fabric="ib-ndr",
        tp=8,
        pp=1,
        ep=1,
        phase="serve",
        batch=32,
        input_tokens=4096,
        output_tokens=4096,
        prefix_cache_frac=0.0,
        weights="bf16",
        kv_dtype="bf16",
        kv_alloc="paged",
        block_size=16,
        spec_method="none",
    )


def _training_cfg():
    from core.config import RabitConfig

    return RabitConfig(
        model="llama-3.1-70b",
        gpu="h100-sxm",
        gpus_per_node=8,
        nodes=8,
        fabric="ib-ndr",
        tp=8,
        pp=2,
        ep=1,
        phase="train",
        train_precision="bf16",
        zero=1,
        micro_batch=1,
        seq_len=4096,
        recompute="selective",
        sequence_parallel=True,
        lora_rank=0,
        qlora=False,
        train_tokens=1e12,
        global_batch_tokens=4 * 2**20,
    )


def test_core_serving_figures():
    from core import physics, serving

    cfg = _serving_cfg()
    s = serving.speed_summary(cfg)
    mem = physics.serving_memory(cfg)
    figs = {
        "decode_step_s": s.decode.step_s,
        "decode_tokens_per_s": s.decode.tokens_per_s,
        "decode_at_mean_s": s.decode.at_mean.time_s,
        "ttft_s": s.prefill.ttft_s,
        "ttft_one_s": s.prefill.ttft_one_s,
        "e2e_s": s.e2e_s,
        "compute_bound_batch": s.compute_bound_batch,
        "memory_total_bytes_per_gpu": mem.total_bytes_per_gpu,
        "memory_max_sequences": mem.max_sequences,
        "fp8_decode_step_s": serving.decode(cfg.with_(weights="fp8", kv_dtype="fp8")).step_s,
        "pp2_decode_step_s": serving.decode(cfg.with_(tp=4, pp=2)).step_s,
        "moe_decode_step_s": serving.decode(cfg.with_(model="mixtral-8x7b", tp=2, gpus_per_node=2)).step_s,
        "spec_speedup": serving.speculative(
            cfg.with_(spec_method="draft", spec_k=4, spec_alpha=0.7, draft_model="llama-3.1-8b")
        ).speedup,
        "math_steps": [[st.key, st.value] for st in s.steps],
    }
    _check("core-serving", figs)


def test_core_training_figures():
    from core import physics, training

    cfg = _training_cfg()
    lay = training.config_layout(cfg)
    r = training.evaluate_layout(cfg, lay)
    tm = physics.training_memory(cfg)
    figs = {
        "layout": lay.label(),
        "step_s": r.step_s,
        "mfu": r.mfu,
        "runtime_s": r.runtime_s,
        "memory_bytes_per_gpu": r.memory_bytes_per_gpu,
        "training_memory_total": tm.total_bytes_per_gpu,
        "top_layouts": [[x.layout.label(), x.step_s] for x in training.layouts_at(cfg, 64)[:5]],
    }
    _check("core-training", figs)


def test_core_optimizer_pick():
    from core import decision
    from core.config import Lengths, SimSpec

    goal = decision.ServingGoal(
        model="llama-3.1-8b",
        rate_per_s=5.0,
        workload=SimSpec(num_requests=500, rate_per_s=5.0, input=Lengths(mean=1000), output=Lengths(mean=250)),
        p95_ttft_s=2.0,
        p95_e2e_s=20.0,
    )
    cons = decision.Constraints(gpus_allowed=("h100-sxm", "a100-80gb", "l40s"), max_simulations=6)
    rec = decision.recommend(goal, cons)
    p = rec.recommendation
    figs = {
        "met": rec.met,
        "pick": p.model_dump(mode="json") if p else None,
        "pareto": [x.label for x in rec.pareto],
        "evaluated": rec.evaluated,
        "simulated": rec.simulated,
    }
    _check("core-optimizer", figs)
