"""The LoRA part of the launch configs (:mod:`core.operations.launch`): each engine's flags for the adapter slots,
the slot rank, the host cache and the adapters to load, with the engines' documentation cited where each is used."""

from __future__ import annotations

from core.config import AdapterSet

__all__ = ["LORA_FLAGS", "lora_argv", "trtllm_lora_note"]


#: Adapters named on the command line; the rest are registered at run time (vLLM) or listed alike (the note says).
LISTED_ADAPTERS = 4
#: vLLM ``--lora-dtype`` values by adapter dtype ("auto": the base model's dtype, BF16 here).
VLLM_LORA_DTYPE = {"bf16": "auto", "fp16": "float16"}
#: SGLang ``--lora-target-modules`` by the config's targets.
SGLANG_TARGETS = {
    "qkvo": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "mlp": ["gate_proj", "up_proj", "down_proj"],
    "all": ["all"],
}


#: How each engine takes adapters beyond those listed at launch (vLLM docs "LoRA Adapters", "Dynamically serving
#: LoRA Adapters"; SGLang docs "LoRA Serving", dynamic loading).
MORE_ADAPTERS = {
    "vllm": "list them alike, or register them at run time with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and "
    "POST /v1/load_lora_adapter",
    "sglang": "list them alike, or load them at run time with POST /load_lora_adapter",
}


def _adapter_modules(a: AdapterSet, engine: str) -> tuple[list[str], list[str]]:
    """``name=path`` of the adapters named on the command line (the hottest first), and the note on the rest."""
    n = min(a.count, LISTED_ADAPTERS)
    items = [f"{a.name_of(i)}=/adapters/{a.name_of(i)}" for i in range(n)]
    notes = [f"adapters: point each name=path at an adapter directory (PEFT format); {a.count:,} adapter(s) served"]
    if a.count > n:
        notes.append(f"the other {a.count - n:,} adapters: {MORE_ADAPTERS[engine]}")
    return items, notes


#: Each engine's flags for the slots, the slot rank, the host cache and the adapters to load.
LORA_FLAGS = {
    "vllm": ("--max-loras", "--max-lora-rank", "--max-cpu-loras", "--lora-modules"),
    "sglang": ("--max-loras-per-batch", "--max-lora-rank", "--max-loaded-loras", "--lora-paths"),
}


def lora_argv(a: AdapterSet | None, engine: str) -> tuple[list[str], list[str]]:
    """vLLM's or SGLang's LoRA flags for a launch's adapters: (argv, notes); nothing without adapters."""
    if a is None:
        return [], []
    mods, notes = _adapter_modules(a, engine)
    slots, rank, host, paths = LORA_FLAGS[engine]
    argv = [
        "--enable-lora",
        slots,
        str(a.slots(engine)),
        rank,
        str(a.slot_rank(engine)),
        host,
        str(a.host_slots(engine)),
    ]
    if engine == "sglang":
        argv += ["--lora-target-modules", *SGLANG_TARGETS[a.targets]]
    elif a.dtype in VLLM_LORA_DTYPE:
        argv += ["--lora-dtype", VLLM_LORA_DTYPE[a.dtype]]
    else:
        notes.append(f"{a.dtype} adapters: vLLM's --lora-dtype takes auto, float16 or bfloat16")
    if engine == "vllm" and a.fully_sharded:  # "use the fully sharded layers" (vllm/config/lora.py)
        argv += ["--fully-sharded-loras"]
    return argv + [paths, *mods], notes


def trtllm_lora_note(a: AdapterSet | None) -> list[str]:
    """TensorRT-LLM takes adapters through its LLM API options file: the note that says how."""
    if a is None:
        return []
    return [
        f"adapters: pass lora_config: {{max_lora_rank: {a.slot_rank('trtllm')}, max_loras: {a.slots('trtllm')}, "
        f"max_cpu_loras: {a.host_slots('trtllm')}}} (LLM API LoraConfig) in a YAML file given to "
        "--extra_llm_api_options; trtllm-serve has no LoRA flags of its own"
    ]
