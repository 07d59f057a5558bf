"""Launch configs: every flag is one the engine documents, the values follow the pick, the manifest parses."""

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import core.decision.optimizer as opt
from core.decision import Constraints, Pick, ServingGoal, candidate_deployment, recommend
from core.operations import command, emit, k8s_manifest, launch_spec
from core.serving import Lengths, SimSpec

ROOT = Path(__file__).resolve().parents[1]

# Flag names as the engines document them (copied from the pages, not from core.operations.launch):
# vLLM "Engine Arguments" usage block (docs.vllm.ai/en/latest/models/engine_args.html)
VLLM = {
    "--tensor-parallel-size",
    "--pipeline-parallel-size",
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--gpu-memory-utilization",
    "--kv-cache-dtype",
    "--quantization",
    "--max-model-len",
    "--host",
    "--port",
}
# SGLang "Server Arguments" (docs.sglang.io/advanced_features/server_arguments.html) and its pipeline page
SGLANG = {
    "--model-path",
    "--tp-size",
    "--pp-size",
    "--max-running-requests",
    "--chunked-prefill-size",
    "--mem-fraction-static",
    "--kv-cache-dtype",
    "--quantization",
    "--context-length",
    "--host",
    "--port",
}
# trtllm-serve options (nvidia.github.io/TensorRT-LLM/0.18.2/commands/trtllm-serve.html; --kv_cache_dtype
# from NVIDIA/TensorRT-LLM PR #11487)
TRTLLM = {
    "--backend",
    "--tp_size",
    "--pp_size",
    "--max_batch_size",
    "--max_num_tokens",
    "--max_seq_len",
    "--kv_cache_free_gpu_memory_fraction",
    "--kv_cache_dtype",
    "--host",
    "--port",
}
DOCS = {"vllm": VLLM, "sglang": SGLANG, "trtllm": TRTLLM}
# documented values: vLLM --kv-cache-dtype {auto,fp8,fp8_e5m2,fp8_e4m3}; SGLang fp8_e4m3 / fp8_e5m2;
# vLLM --quantization {aqlm,awq,fp8,gptq,...}; SGLang --quantization fp8
KV_VALUES = {
    "vllm": {"auto", "fp8", "fp8_e4m3", "fp8_e5m2"},
    "sglang": {"auto", "fp8_e4m3", "fp8_e5m2"},
    "trtllm": {"auto", "fp8", "nvfp4"},
}

GOAL = ServingGoal(
    model="llama-3.1-70b",
    rate_per_s=4,
    workload=SimSpec(
        input=Lengths(kind="lognormal", mean=1000, spread=0.5), output=Lengths(kind="lognormal", mean=250, spread=0.5)
    ),
)


def pick(gpu="h100-sxm", n=4, tp=4, pp=1, weights="fp8", kv="fp8", replicas=3, seqs=96) -> Pick:
    return Pick(
        gpu=gpu,
        gpus_per_replica=n,
        tp=tp,
        pp=pp,
        weights=weights,
        kv_dtype=kv,
        replicas=replicas,
        cost_per_hour=1.0,
        cost_per_million_tokens=1.0,
        p95_ttft_s=1.0,
        p95_itl_s=0.05,
        p95_e2e_s=10.0,
        capacity_requests_per_s=5.0,
        bottleneck="memory",
        meets_target=True,
        label="x",
        max_num_seqs=seqs,
    )


def argv_of(text: str) -> list[str]:
    return shlex.split(" ".join(line for line in text.splitlines() if not line.startswith("#")).replace("\\", ""))


def flags(argv: list[str]) -> dict[str, str]:
    return {
        a: (argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else "")
        for i, a in enumerate(argv)
        if a.startswith("--")
    }


CASES = [
    pick(),
    pick(weights="bf16", kv="bf16", n=8, tp=8),
    pick(gpu="mi300x", n=1, tp=1, weights="bf16"),
    pick(gpu="b200", n=2, tp=2, weights="nvfp4"),
    pick(gpu="h100-pcie", n=16, tp=8, pp=2),
]


@pytest.mark.parametrize("p", CASES, ids=lambda p: f"{p.gpu}-tp{p.tp}-pp{p.pp}-{p.weights}-{p.kv_dtype}")
@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_every_flag_is_documented_and_follows_the_pick(p, engine):
    s = launch_spec(p, GOAL)
    if engine == "trtllm" and s.vendor != "nvidia":
        with pytest.raises(ValueError, match="NVIDIA"):
            command(engine, s)
        return
    f = flags(argv_of(command(engine, s)))
    assert set(f) <= DOCS[engine], set(f) - DOCS[engine]
    tp, pp, seqs, kv = {
        "vllm": ("--tensor-parallel-size", "--pipeline-parallel-size", "--max-num-seqs", "--kv-cache-dtype"),
        "sglang": ("--tp-size", "--pp-size", "--max-running-requests", "--kv-cache-dtype"),
        "trtllm": ("--tp_size", "--pp_size", "--max_batch_size", "--kv_cache_dtype"),
    }[engine]
    assert int(f[tp]) == p.tp and int(f[pp]) == p.pp and int(f[seqs]) == p.max_num_seqs
    assert f[kv] in KV_VALUES[engine] and (f[kv] == "auto") == (p.kv_dtype == "bf16")
    if engine != "trtllm":
        assert ("--quantization" in f) == (p.weights != "bf16")
        if p.weights == "fp8":
            assert f["--quantization"] == "fp8"
    # lognormal(1000, 0.5) clipped at its documented upper tail plus the longest output: well above the means
    length = int(f.get("--max-model-len") or f.get("--context-length") or f["--max_seq_len"])
    assert 1250 < length <= 131072


@pytest.mark.parametrize("p", CASES[:4], ids=lambda p: p.gpu)
def test_k8s_manifest_parses_and_requests_the_gpus(p):
    s = launch_spec(p, GOAL)
    doc = yaml.safe_load(k8s_manifest(s))
    assert doc["kind"] == "Deployment" and doc["apiVersion"] == "apps/v1"
    assert doc["spec"]["replicas"] == p.replicas
    pod = doc["spec"]["template"]["spec"]
    assert doc["spec"]["selector"]["matchLabels"] == doc["spec"]["template"]["metadata"]["labels"]
    c = pod["containers"][0]
    vendor_key = "amd.com/gpu" if p.gpu.startswith("mi") else "nvidia.com/gpu"
    assert c["resources"]["limits"] == {vendor_key: p.gpus_per_replica}
    label_key = "amd.com/gpu.product-name" if p.gpu.startswith("mi") else "nvidia.com/gpu.product"
    assert list(pod["nodeSelector"]) == [label_key]
    if p.gpu == "h100-sxm":  # the value GPU Feature Discovery writes on DGX/HGX H100 nodes
        assert pod["nodeSelector"][label_key] == "NVIDIA-H100-80GB-HBM3"
    assert c["command"][:2] == ["vllm", "serve"] and set(flags(c["command"])) <= VLLM


def test_emit_rejects_unknown_kinds():
    with pytest.raises(ValueError, match="unknown"):
        emit("tgi", launch_spec(CASES[0], GOAL))


def test_recommendation_launches_with_the_batch_cap_its_simulation_used(monkeypatch):
    seen = []
    real = opt.simulate_deployment

    def spy(cfg, spec, layout, **kw):
        seen.append(spec.max_batch)
        return real(cfg, spec, layout, **kw)

    monkeypatch.setattr(opt, "simulate_deployment", spy)
    goal = GOAL.model_copy(update={"p95_itl_s": 0.05, "workload": GOAL.workload.with_(num_requests=300)})
    r = recommend(goal, Constraints(gpus_allowed=("h200-sxm",), weights_allowed=("fp8",), max_simulations=3))
    assert r.met
    # the ITL target caps the batch below the engine default of 256, and the simulation ran with that cap
    assert 1 <= r.recommendation.max_num_seqs < 256
    assert r.recommendation.max_num_seqs in seen
    f = flags(argv_of(emit("vllm", launch_spec(r.recommendation, goal))))
    assert int(f["--max-num-seqs"]) == r.recommendation.max_num_seqs


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "recommend", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_cli_emit_k8s_and_json():
    base = (
        "--model",
        "llama-3.1-8b",
        "--rate",
        "2",
        "--gpus-allowed",
        "h100-sxm,mi300x",
        "--max-simulations",
        "2",
        "--requests",
        "100",
    )
    out = _cli(*base, "--emit", "k8s")
    assert out.returncode == 0, out.stderr
    doc = yaml.safe_load(out.stdout)
    assert doc["kind"] == "Deployment"
    js = _cli(*base, "--emit", "sglang", "--json")
    payload = json.loads(js.stdout)
    assert payload["launch"]["kind"] == "sglang" and "sglang.launch_server" in payload["launch"]["text"]
    bad = _cli(*base, "--emit", "tgi")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "engine, flag, value",
    [
        # vLLM engine args: --enable-expert-parallel (EP size = TP x DP); SGLang server arguments: --ep-size;
        # trtllm-serve: --ep_size
        ("vllm", "--enable-expert-parallel", ""),
        ("sglang", "--ep-size", "8"),
        ("trtllm", "--ep_size", "8"),
    ],
)
def test_expert_parallel_picks_launch_with_the_engines_ep_flag(engine, flag, value):
    p = pick(n=8, tp=8).model_copy(update={"ep": 8})
    f = flags(argv_of(command(engine, launch_spec(p, GOAL))))
    assert f[flag] == value
    assert set(f) - DOCS[engine] == {flag}  # the one flag only an EP pick adds
    plain = flags(argv_of(command(engine, launch_spec(pick(n=8, tp=8), GOAL))))
    assert flag not in plain


# Eager mode: vLLM engine arguments "--enforce-eager: Whether to always use eager-mode PyTorch. If True, we will
# disable CUDA graph and always execute the model in eager mode" (docs.vllm.ai/en/latest/configuration/
# engine_args.html); SGLang server arguments "--disable-cuda-graph: Disable cuda graph"
# (docs.sglang.io/advanced_features/server_arguments.html). trtllm-serve documents no such option: its PyTorch
# backend takes CUDA graphs from the LLM API's cuda_graph_config (TorchLlmArgs), so the command carries a comment.
EAGER = {"vllm": "--enforce-eager", "sglang": "--disable-cuda-graph"}


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_eager_mode_in_the_config_reaches_the_launch_command(engine):
    from core.config import RabitConfig
    from core.physics import StepModel

    cfg = RabitConfig(model="llama-3.1-70b", gpu="h100-sxm", tp=4, gpus_per_node=4)
    eager_cfg = cfg.with_(workload=cfg.workload.model_copy(update={"cuda_graphs": False}))
    goal, eager = ServingGoal.from_config(cfg), ServingGoal.from_config(eager_cfg)
    assert goal.cuda_graphs and not eager.cuda_graphs
    text = command(engine, launch_spec(pick(), eager))
    f, plain = flags(argv_of(text)), flags(argv_of(command(engine, launch_spec(pick(), goal))))
    if engine in EAGER:
        assert f[EAGER[engine]] == "" and EAGER[engine] not in plain
        assert set(f) - DOCS[engine] == {EAGER[engine]}  # the one flag eager mode adds
    else:
        assert f == plain and "cuda_graph_config" in text  # no flag: said in a comment
        assert "cuda_graph_config" not in command(engine, launch_spec(pick(), goal))
    # the optimizer sizes the candidates it launches in the same mode: no iteration replays a graph
    c = opt.Candidate(gpu="h100-sxm", gpus_per_replica=4, tp=4, pp=1, weights="fp8", kv_dtype="fp8")
    assert StepModel.from_deployment(candidate_deployment(eager, c)).graph_max_tokens == 0
    assert StepModel.from_deployment(candidate_deployment(goal, c)).graph_max_tokens > 0
