"""Launch configs for a disaggregated pick (:mod:`core.operations.launch` builds one replica's): a command per
pool with the engine's disaggregation flags, how requests reach the pools, and a Kubernetes Deployment per pool.

One command per pool. vLLM: both pools serve with
``--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'`` (``KVTransferConfig``, vLLM
``config/kv_transfer.py``; the llm-d ModelService ``values-pd.yaml`` runs prefill and decode pods so), behind a
disaggregation-aware router (llm-d's inference scheduler, or vLLM's disaggregated-serving proxy example). SGLang:
``--disaggregation-mode prefill`` / ``decode`` with ``--disaggregation-transfer-backend mooncake`` (server
arguments; docs "PD Disaggregation"), and the router ``python -m sglang_router.launch_router --pd-disaggregation
--prefill URL --decode URL`` (sglang-router 0.3.2 ``router_args.py``). TensorRT-LLM's disaggregated serving is set
in YAML files that are not emitted here (``trtllm`` refuses a disaggregated pick). ``k8s``: a Deployment per pool.
"""

from __future__ import annotations

import json

from core.operations.launch import ARGV, DOCUMENTED_FLAGS, LaunchSpec, emit, join_script, k8s_manifest, launch_spec

#: vLLM's KV connector for a disaggregated pool (both roles in one process: ``kv_both``).
VLLM_KV_TRANSFER = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
#: SGLang's default KV transfer backend (``--disaggregation-transfer-backend``, default mooncake).
SGLANG_TRANSFER_BACKEND = "mooncake"
#: The SGLang router policy closest to each RA-BIT router (``--policy`` choices random, round_robin, cache_aware,
#: power_of_two, manual): least-outstanding is cache_aware's shortest-queue fallback.
SGLANG_POLICY = {
    "round-robin": "round_robin",
    "least-outstanding": "cache_aware",
    "power-of-two": "power_of_two",
    "prefix-affinity": "cache_aware",
}
#: The ports each pool serves on (one per instance host) and the router's.
POOL_PORTS = {"prefill": 30000, "decode": 30001}


def pool_specs(pick, goal) -> tuple[LaunchSpec, LaunchSpec]:
    """(prefill, decode) launch specs of a disaggregated pick: each pool's GPU, layout, instances and batch cap."""
    out = []
    for role in ("prefill", "decode"):
        pool = getattr(pick, role)
        if pool is None:
            raise ValueError("not a disaggregated pick: it has no prefill and decode pools")
        one = pick.model_copy(
            update={
                "gpu": pool.gpu,
                "gpus_per_replica": pool.gpus_per_instance,
                "tp": pool.tp,
                "pp": pool.pp,
                "ep": pool.ep,
                "replicas": pool.instances,
                "max_num_seqs": pool.max_num_seqs,
            }
        )
        out.append(launch_spec(one, goal).model_copy(update={"port": POOL_PORTS[role]}))
    return out[0], out[1]


def disagg_commands(engine: str, pick, goal) -> str:
    """Both pools' launch commands with the engine's disaggregation flags, and how requests reach them."""
    pre, dec = pool_specs(pick, goal)
    if engine == "trtllm":
        raise ValueError(
            "TensorRT-LLM's disaggregated serving is configured in YAML files (trtllm-serve disaggregated) that RA-BIT "
            "does not emit; use vllm, sglang or k8s"
        )
    if engine not in ("vllm", "sglang"):
        raise ValueError(f"unknown engine {engine!r}; use vllm or sglang")
    parts = []
    for role, s in (("prefill", pre), ("decode", dec)):
        argv, notes = ARGV[engine](s)
        if engine == "vllm":
            argv += ["--kv-transfer-config", VLLM_KV_TRANSFER]
        else:
            argv += ["--disaggregation-mode", role, "--disaggregation-transfer-backend", SGLANG_TRANSFER_BACKEND]
        notes = [f"{role} pool: {s.replicas} instance(s), each one process as below on its own GPUs"] + notes
        parts.append(join_script(argv, notes))
    parts.append(_router(engine, pre, dec, goal))
    return "\n".join(parts)


def k8s_disagg(pick, goal) -> str:
    """A Deployment per pool, each pod one instance serving with vLLM's NIXL KV connector (YAML text)."""
    out = []
    for role, s in zip(("prefill", "decode"), pool_specs(pick, goal)):
        doc = k8s_manifest(s, "vllm")
        doc = doc.replace(f"rabit-{s.gpu}-vllm".replace(".", "-"), f"rabit-{s.gpu}-vllm-{role}".replace(".", "-"))
        doc = doc.replace("        command:\n", "        command:\n").replace(
            f'        - "--port"\n        - "{s.port}"\n',
            f'        - "--port"\n        - "{s.port}"\n        - "--kv-transfer-config"\n'
            f"        - {json.dumps(VLLM_KV_TRANSFER)}\n",
        )
        out.append(f"# {role} pool (disaggregated; route with llm-d's inference scheduler)\n" + doc)
    return "---\n".join(out)


def emit_pick(kind: str, pick, goal) -> str:
    """The launch config of a pick: :func:`emit` of its one replica shape, or both pools when disaggregated."""
    if getattr(pick, "prefill", None) is not None:
        if kind == "k8s":
            return k8s_disagg(pick, goal)
        return disagg_commands(kind, pick, goal)
    return emit(kind, launch_spec(pick, goal))


def _router(engine: str, pre: LaunchSpec, dec: LaunchSpec, goal) -> str:
    """How requests reach the pools: SGLang's PD router command at the RA-BIT router's closest policy, or for vLLM
    the note on a disaggregation-aware proxy."""
    policy = SGLANG_POLICY.get(getattr(goal, "router", "least-outstanding"), "cache_aware")
    if engine == "sglang":
        router = [
            "python",
            "-m",
            "sglang_router.launch_router",
            "--pd-disaggregation",
            "--prefill",
            f"http://PREFILL_HOST:{pre.port}",
            "--decode",
            f"http://DECODE_HOST:{dec.port}",
            "--policy",
            policy,
            "--host",
            "0.0.0.0",
            "--port",
            "8000",
        ]
        return join_script(
            router,
            [f"the router: one --prefill / --decode per instance; flags: {DOCUMENTED_FLAGS['sglang-router'][0]}"],
        )
    return (
        "# the router: a disaggregation-aware proxy sends each request to a prefill instance, then its KV and the\n"
        "# request to a decode instance (llm-d's inference scheduler; vLLM's examples/online_serving disaggregated\n"
        "# serving proxy). Each pod sets VLLM_NIXL_SIDE_CHANNEL_HOST to its own address.\n"
    )
