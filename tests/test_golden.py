"""Golden outputs: the README's example commands and a few core figures, frozen.

Each README ``rabit ... --json`` example and each core figure below was recorded from the code as it stood
when the files under ``tests/golden/`` were written; a refactor must reproduce them exactly (floats
compared by their full ``repr``). The only keys ignored are those of the uncertainty bands added on top of
the point estimates (``ranges``, ``range_basis`` and the verdicts read from them). A deliberate change of a figure rewrites the file with
``RABIT_WRITE_GOLDEN=1 pytest tests/test_golden.py`` and says why in the commit.

The core figures pass every field they depend on explicitly, so a change of a default does not move them.
"""

from __future__ import annotations

import json
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


def _check(name: str, obj) -> None:
    path = GOLDEN / f"{name}.json"
    text = _canonical(obj)
    if WRITE:
        path.write_text(text)
        return
    assert path.exists(), f"no golden file {path.name}; write it with RABIT_WRITE_GOLDEN=1"
    assert text == path.read_text(), f"{path.name} differs from the frozen output"


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


def test_readme_has_the_examples():
    # memory x3, speed, simulate, train x2, recommend x2, models, gpus
    assert len(COMMANDS) >= 11  # every README example has its golden file (the next test fails on a missing one)


@pytest.mark.parametrize("cmd", COMMANDS, ids=[_name(c) for c in COMMANDS])
def test_readme_command_json_is_frozen(cmd, capsys):
    argv = shlex.split(cmd)[1:]
    argv = [str(GOLDEN / "my-llama.json") if a == "path/to/config.json" else a for a in argv]
    missing = [a for a in argv if a.endswith((".txt", ".csv", ".jsonl")) and not (ROOT / a).exists()]
    if missing:
        pytest.skip(f"the example reads {missing[0]}, a file of the user's")
    if "--json" not in argv:
        argv.append("--json")
    assert main(argv) == 0
    _check("cli-" + _name(cmd), json.loads(capsys.readouterr().out))


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
