"""Low-rank adapters (LoRA) over one shared base: their bytes, the engine's reservation, their FLOPs per token, the
bytes an iteration reads for them, and the time to load one onto the GPU.

An adapter adds ``B A`` to a targeted linear layer ``W`` (d_in -> d_out): ``A`` is r x d_in (the shrink), ``B`` is
d_out x r (the expand), so one module holds ``r (d_in + d_out)`` weights (Hu et al., LoRA, arXiv 2106.09685)::

    adapter bytes     = r x sum_modules L_m (d_in + d_out) x b                     one adapter, whole model
    per GPU, one slot = r_s x sum_modules L_m / pp (d_in / s_in + d_out / s_out) x b
    reserved per GPU  = max_loras x (one slot)                                    out of the KV budget
    FLOPs per token   = 2 r_s x sum_modules L_m / pp (d_in / s_in + d_out / s_out)  shrink + expand, per GPU

The sharding is vLLM's default (``fully_sharded_loras`` off, ``vllm/lora/layers``): a column-parallel layer (q, k, v,
gate, up) keeps ``A`` whole on every rank and splits ``B``'s rows (``s_in = 1``, ``s_out = TP``; k and v by the
KV heads a rank holds), a row-parallel one (o, down) splits ``A``'s columns and keeps ``B`` whole (``s_in = TP``,
``s_out = 1``): "only half of the LoRA computation is sharded with tensor parallelism" (the flag's help text). vLLM
allocates ``lora_a_stacked`` (max_loras, 1, max_lora_rank, input_size) and ``lora_b_stacked`` (max_loras, 1,
output_size, max_lora_rank) for every LoRA-wrapped layer when the model loads, inside the profiled "Model loading
took" (``create_lora_weights``; ``GPUModelRunner.load_model``), so ``max_loras`` slots at ``max_lora_rank`` come out
of the KV budget whatever adapters are loaded, and the kernels run at the slot rank (smaller adapters are
zero-padded into it). Routed experts are not targeted (as the training count, :func:`core.physics.lora_params`).

Llama-3.1-8B, rank 16, all linear layers, BF16: 16 x 32 x (8,192 + 5,120 + 5,120 + 8,192 + 3 x 18,432) x 2 B
= 83,886,080 B (80 MiB).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from core.base import NO_TRACE, Trace
from core.catalog import ModelArch
from core.config import Deployment, RabitConfig, as_deployment
from core.physics.collectives import ACT_BYTES

__all__ = [
    "expected_distinct",
    "AdapterFootprint",
    "AdapterModule",
    "adapter_footprint",
    "adapter_load_s",
    "adapter_modules",
    "adapter_weights_per_rank",
]

Split = Literal["column", "row", "replicated"]


@dataclass(frozen=True)
class AdapterModule:
    """One targeted linear layer of the base: its shape, how TP splits it and how many layers carry it."""

    name: str
    d_in: int
    d_out: int
    layers: int  # layers (of the whole model) carrying this module
    split: Split
    group: str  # the engine's LoRA-wrapped layer it belongs to (vLLM fuses q, k, v into qkv_proj; gate, up)
    out_shard_cap: int = 0  # at most this many ways TP splits d_out (k, v: the KV heads); 0: no cap

    def shards(self, tp: int) -> tuple[int, int]:
        """(s_in, s_out): how many ways TP splits the layer's input and output on one rank (its activations, and
        its adapter weights under vLLM's default sharding)."""
        cap = min(tp, self.out_shard_cap) if self.out_shard_cap else tp
        if self.split == "column":
            return 1, cap
        if self.split == "row":
            return tp, 1
        return 1, 1

    def weight_shards(self, tp: int, fully: bool = False) -> tuple[int, int]:
        """(s_in, s_out) of the adapter's weights: as :meth:`shards`, or, fully sharded (vLLM
        ``--fully-sharded-loras``; Punica and S-LoRA shard like Megatron), both ``A`` and ``B`` split ``tp`` ways."""
        if not fully or self.split == "replicated":
            return self.shards(tp)
        return tp, min(tp, self.out_shard_cap) if self.out_shard_cap else tp

    def per_gpu(self, tp: int, fully: bool = False) -> float:
        """Adapter weights of this module per unit rank on one TP rank, one layer: d_in / s_in + d_out / s_out."""
        s_in, s_out = self.weight_shards(tp, fully)
        return self.d_in / s_in + self.d_out / s_out


def adapter_modules(m: ModelArch, targets: str) -> tuple[AdapterModule, ...]:
    """The linear layers an adapter of ``targets`` ("qkvo", "mlp", "all") adds weights to, from the model's own
    shapes. Attention projections on the attention layers (MLA: q_a / q_b, kv_a / kv_b and o; the down-projections
    to the latents are replicated across TP, as vLLM's DeepSeek layers are); the MLP's on the dense layers and each
    MoE layer's shared experts (routed experts are not targeted)."""
    h = m.hidden_size
    out: list[AdapterModule] = []
    if targets in ("qkvo", "all"):
        La = m.attention_layers
        if m.is_mla:
            qk = m.qk_nope_head_dim + m.qk_rope_head_dim
            if m.q_lora_rank:
                out.append(AdapterModule("q_a_proj", h, m.q_lora_rank, La, "replicated", "q_a_proj"))
                out.append(AdapterModule("q_b_proj", m.q_lora_rank, m.num_heads * qk, La, "column", "q_b_proj"))
            else:
                out.append(AdapterModule("q_proj", h, m.num_heads * qk, La, "column", "q_proj"))
            kv_a = m.kv_lora_rank + m.qk_rope_head_dim
            out.append(AdapterModule("kv_a_proj_with_mqa", h, kv_a, La, "replicated", "kv_a_proj_with_mqa"))
            kv_b = m.num_heads * (m.qk_nope_head_dim + m.v_head_dim)
            out.append(AdapterModule("kv_b_proj", m.kv_lora_rank, kv_b, La, "column", "kv_b_proj"))
            out.append(AdapterModule("o_proj", m.num_heads * m.v_head_dim, h, La, "row", "o_proj"))
        else:
            q, kv = m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim
            out.append(AdapterModule("q_proj", h, q, La, "column", "qkv_proj"))
            out.append(AdapterModule("k_proj", h, kv, La, "column", "qkv_proj", m.num_kv_heads))
            out.append(AdapterModule("v_proj", h, kv, La, "column", "qkv_proj", m.num_kv_heads))
            out.append(AdapterModule("o_proj", q, h, La, "row", "o_proj"))
    if targets in ("mlp", "all"):
        swiglu = m.mlp_kind == "swiglu"
        for layers, width, tag in (
            (m.dense_layers, m.intermediate_size, ""),
            (
                m.moe_layers * m.num_shared_experts,
                m.shared_intermediate_size or m.moe_intermediate_size,
                "shared_experts.",
            ),
        ):
            if not layers or not width:
                continue
            if swiglu:
                out.append(AdapterModule(tag + "gate_proj", h, width, layers, "column", tag + "gate_up_proj"))
                out.append(AdapterModule(tag + "up_proj", h, width, layers, "column", tag + "gate_up_proj"))
            else:
                out.append(AdapterModule(tag + "up_proj", h, width, layers, "column", tag + "up_proj"))
            out.append(AdapterModule(tag + "down_proj", width, h, layers, "row", tag + "down_proj"))
    return tuple(out)


def _numbered(mods: tuple[AdapterModule, ...]):
    return ((i, md) for i, md in enumerate(mods, start=1))


def _module_inputs(mods: tuple[AdapterModule, ...], tp: int | None = None, fully: bool = False) -> dict[str, Any]:
    """The recorded inputs of a sum over modules: L_i, i_i, o_i (and, given ``tp``, the weights' shards si_i, so_i)."""
    out: dict[str, Any] = {}
    for i, md in _numbered(mods):
        out.update({f"L{i}": md.layers, f"i{i}": md.d_in, f"o{i}": md.d_out})
        if tp is not None:
            s_in, s_out = md.weight_shards(tp, fully)
            out.update({f"si{i}": s_in, f"so{i}": s_out})
    return out


def adapter_weights_per_rank(mods: tuple[AdapterModule, ...]) -> int:
    """Weights of one adapter per unit rank over the whole model: sum_modules L_m (d_in + d_out)."""
    return sum(md.layers * (md.d_in + md.d_out) for md in mods)


def per_gpu_weights_per_rank(mods: tuple[AdapterModule, ...], tp: int, pp: int, fully: bool = False) -> float:
    """Weights per unit rank one GPU of one stage holds: sum_modules L_m / pp (d_in / s_in + d_out / s_out)."""
    return sum(md.layers * md.per_gpu(tp, fully) for md in mods) / pp


def act_elems_per_token(mods: tuple[AdapterModule, ...], tp: int, pp: int) -> float:
    """Activation elements the adapter kernels move per token on one GPU of one stage: the shrink reads the layer's
    input, the expand reads and writes its output (it adds ``B A x`` into it): L_m / pp (d_in / s_in + 2 d_out / s_out).
    """
    total = 0.0
    for md in mods:
        s_in, s_out = md.shards(tp)
        total += md.layers * (md.d_in / s_in + 2 * md.d_out / s_out)
    return total / pp


def wrapped_layers(mods: tuple[AdapterModule, ...]) -> int:
    """LoRA-wrapped layers of the whole model (vLLM wraps a fused layer once: qkv_proj, gate_up_proj)."""
    seen: dict[str, int] = {}
    for md in mods:
        seen[md.group] = md.layers
    return sum(seen.values())


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)


class AdapterFootprint(_Frozen):
    """What an adapter set takes on one GPU and in host memory, and the constants the step model reads."""

    count: int
    adapter_bytes: float  # one adapter at the set's largest rank, whole model
    set_bytes: float  # every adapter of the set at its own rank
    slot_rank: int
    slots: int
    host_slots: int
    slot_bytes_per_gpu: float  # one slot at the slot rank on one GPU (its stage's layers)
    reserved_bytes_per_gpu: float  # slots x slot_bytes_per_gpu
    host_cache_bytes: float  # the host cache full of the set's largest adapters
    weights_per_rank: int  # sum_modules L_m (d_in + d_out)
    weights_per_rank_per_gpu: float
    wrapped_layers: int
    modules: tuple[str, ...]


def adapter_footprint(dep: Deployment | RabitConfig, tr: Trace = NO_TRACE) -> AdapterFootprint:
    """Adapter bytes and the engine's reservation per GPU for the config's adapter set (recorded on ``tr``)."""
    dep = as_deployment(dep)
    cfg, m = dep.config, dep.model
    a = cfg.adapters
    engine = cfg.workload.engine
    mods = adapter_modules(m, a.targets)
    b = a.bytes_per_param
    n_w = adapter_weights_per_rank(mods)
    r_max = a.max_rank
    n_gpu = per_gpu_weights_per_rank(mods, cfg.tp, cfg.pp, a.fully_sharded)
    slot_rank, slots, host = a.slot_rank(engine), a.slots(engine), a.host_slots(engine)
    names = tuple(md.name for md in mods)
    if tr.enabled:
        tr.step(
            "adapter_weights_per_rank",
            "Adapter weights per unit rank",
            "n_a",
            " + ".join(f"L{i} * (i{i} + o{i})" for i in range(1, len(mods) + 1)),
            n_w,
            unit="",
            **_module_inputs(mods),
            note=f"{len(mods)} targeted modules: "
            + "; ".join(
                f"{i}: {md.name} {md.d_in:,} -> {md.d_out:,} on {md.layers} layers" for i, md in _numbered(mods)
            ),
        )
    one = tr.step(
        "adapter_bytes",
        "One adapter (largest rank, whole model)",
        "w_a",
        "r * n_a * b_a",
        r_max * n_w * b,
        unit="B",
        r=r_max,
        n_a=n_w,
        b_a=b,
        note=f"rank {r_max}, {a.dtype}; LoRA adds r (d_in + d_out) weights to each targeted layer",
    )
    full, rest = divmod(a.count, len(a.ranks))
    set_bytes = float((full * sum(a.ranks) + sum(a.ranks[:rest])) * n_w * b)
    tr.step(
        "adapter_set_bytes",
        "Every adapter of the set (each at its rank)",
        "W_A",
        "R_sum * n_a * b_a",
        set_bytes,
        unit="B",
        R_sum=full * sum(a.ranks) + sum(a.ranks[:rest]),
        n_a=n_w,
        b_a=b,
        note=f"{a.count:,} adapters at ranks {', '.join(map(str, a.ranks))} in turn (R_sum: their ranks added up): "
        "what storage holds",
    )
    tr.step(
        "adapter_weights_per_rank_per_gpu",
        "Adapter weights per unit rank on one GPU",
        "n_g",
        "(" + " + ".join(f"L{i} * (i{i} / si{i} + o{i} / so{i})" for i in range(1, len(mods) + 1)) + ") / pp",
        n_gpu,
        unit="",
        **_module_inputs(mods, cfg.tp, a.fully_sharded),
        pp=cfg.pp,
        note=(
            f"TP {cfg.tp}: fully sharded, A and B split TP ways (vLLM --fully-sharded-loras)"
            if a.fully_sharded
            else f"TP {cfg.tp}: column-parallel layers keep A whole and split B (s_out = TP), row-parallel ones split "
            "A (s_in = TP) and keep B whole (vLLM's default, fully_sharded_loras off)"
        )
        + f"; PP {cfg.pp} splits the layers",
    )
    slot = tr.step(
        "adapter_slot_bytes_per_gpu",
        "One adapter slot on one GPU (at the slot rank)",
        "w_s",
        "r_s * n_g * b_a",
        slot_rank * n_gpu * b,
        unit="B",
        r_s=slot_rank,
        n_g=n_gpu,
        b_a=b,
        note=f"max_lora_rank {slot_rank}"
        + (f": {slot_rank - r_max} ranks above the adapters' largest are padding" if slot_rank > r_max else ""),
    )
    reserved = tr.step(
        "adapter_reserved_bytes_per_gpu",
        "Adapter slots reserved per GPU",
        "L_r",
        "K * w_s",
        slots * slot,
        unit="B",
        K=slots,
        w_s=slot,
        note=f"max_loras {slots}: pre-allocated when the model loads, whatever adapters are resident; "
        "it comes out of the KV budget",
    )
    return AdapterFootprint(
        count=a.count,
        adapter_bytes=one,
        set_bytes=set_bytes,
        slot_rank=slot_rank,
        slots=slots,
        host_slots=host,
        slot_bytes_per_gpu=slot,
        reserved_bytes_per_gpu=reserved,
        host_cache_bytes=min(host, a.count) * one,
        weights_per_rank=n_w,
        weights_per_rank_per_gpu=n_gpu,
        wrapped_layers=wrapped_layers(mods),
        modules=names,
    )


def adapter_load_s(
    dep: Deployment | RabitConfig, rank: int, *, from_storage: bool, tr: Trace = NO_TRACE, key: str = "adapter_load_s"
) -> float:
    """Time to bring one adapter of ``rank`` into a GPU slot [s], every GPU of the replica loading its own shard in
    parallel over its host link (the catalog's ``host_bw_gb_per_s``); from storage the host reads the whole adapter
    first::

        t = n_l / pp x t_l + r n_g b / (BW_host eta_h)  [+ r n_a b / BW_storage]

    ``n_l`` LoRA-wrapped layers each cost ``t_l`` of copies and bookkeeping (assumption ``adapter_layer_load_us``),
    ``eta_h`` is the share of the host link a copy achieves (``adapter_link_eff``: pinned and contiguous, or not).
    Llama-3.1-8B rank 16 on one H100 from host memory: 128 x 100 us + 83.9 MB / (64 GB/s x 0.7) = 12.8 + 1.9 ms.
    """
    dep = as_deployment(dep)
    cfg, m, g = dep.config, dep.model, dep.gpu
    x = cfg.assumptions
    a = cfg.adapters
    mods = adapter_modules(m, a.targets)
    b = a.bytes_per_param
    n_l = wrapped_layers(mods)
    n_g = per_gpu_weights_per_rank(mods, cfg.tp, cfg.pp, a.fully_sharded)
    n_a = adapter_weights_per_rank(mods)
    bw = g.host_bw_bytes_per_s
    t = n_l / cfg.pp * x.adapter_layer_load_us * 1e-6 + rank * n_g * b / (bw * x.adapter_link_eff)
    store = rank * n_a * b / (x.adapter_storage_gb_per_s * 1e9) if from_storage else 0.0
    if not tr.enabled:
        return t + store
    inputs: dict[str, Any] = dict(
        n_l=n_l,
        pp=cfg.pp,
        t_l=x.adapter_layer_load_us * 1e-6,
        r=rank,
        n_g=n_g,
        b_a=b,
        BW_h=bw,
        eta_h=x.adapter_link_eff,
    )
    if from_storage:
        return tr.step(
            key,
            "Adapter load from storage",
            "t_load",
            "n_l / pp * t_l + r * n_g * b_a / (BW_h * eta_h) + r * n_a * b_a / BW_s",
            t + store,
            unit="s",
            units={"t_l": "s", "BW_h": "B/s", "BW_s": "B/s", "eta_h": "frac"},
            **inputs,
            n_a=n_a,
            BW_s=x.adapter_storage_gb_per_s * 1e9,
            note=f"beyond the host cache: read from storage at {x.adapter_storage_gb_per_s:g} GB/s "
            "(assumption adapter_storage_gb_per_s), then copied to the GPU",
        )
    return tr.step(
        key,
        "Adapter load from host memory",
        "t_load",
        "n_l / pp * t_l + r * n_g * b_a / (BW_h * eta_h)",
        t,
        unit="s",
        units={"t_l": "s", "BW_h": "B/s", "eta_h": "frac"},
        **inputs,
        note=f"over {g.host_link or 'a PCIe Gen5 x16 link'} ({bw / 1e9:g} GB/s per direction), every GPU its shard",
    )


def act_bytes_per_token(m: ModelArch, targets: str, tp: int, pp: int) -> float:
    """Activation bytes the adapter kernels move per token on one GPU of one stage [B] (:func:`act_elems_per_token`
    at 2 B)."""
    return act_elems_per_token(adapter_modules(m, targets), tp, pp) * ACT_BYTES


def lora_constants(dep: Deployment, tr: Trace = NO_TRACE) -> dict[str, Any]:
    """The step model's adapter constants for the config's adapter set, each recorded on ``tr``::

        f_l = 2 r_s n_g     w_l = r_s n_g b_a     a_l = 2 B x sum_m L_m / pp (d_in / s_in + 2 d_out / s_out)

    with the slot rank ``r_s`` (every kernel runs at it: smaller adapters are zero-padded into their slot) and
    ``n_g`` the adapter weights per unit rank on one GPU of one stage (:mod:`core.physics.adapters`). Llama-3.1-8B
    at TP 1, all linear layers, rank 16: f_l = 2 x 16 x 2,621,440 = 83.9 MFLOP per token (0.5 % of the base's
    16 GFLOP), w_l = 83.9 MB per distinct adapter.
    """
    cfg, m = dep.config, dep.model
    a = cfg.adapters
    engine = cfg.workload.engine
    mods = adapter_modules(m, a.targets)
    n_g = per_gpu_weights_per_rank(mods, cfg.tp, cfg.pp, a.fully_sharded)
    r_s = a.slot_rank(engine)
    b = a.bytes_per_param
    f_l = 2.0 * r_s * n_g
    w_l = r_s * n_g * b
    a_l = act_elems_per_token(mods, cfg.tp, cfg.pp) * ACT_BYTES
    if tr.enabled:
        tr.step(
            "lora_flop_per_token",
            "Adapter FLOPs per token per GPU (shrink + expand)",
            "f_l",
            "2 * r_s * n_g",
            f_l,
            unit="FLOP",
            r_s=r_s,
            n_g=n_g,
            note=f"at the slot rank {r_s} (max_lora_rank): smaller adapters are zero-padded into their slot",
        )
        tr.step(
            "lora_bytes_per_adapter",
            "Adapter weights read per distinct adapter per GPU",
            "w_l",
            "r_s * n_g * b_a",
            w_l,
            unit="B",
            r_s=r_s,
            n_g=n_g,
            b_a=b,
            note="every distinct adapter of the batch is read once per iteration, padded to the slot rank",
        )
        tr.step(
            "lora_act_bytes_per_token",
            "Activations the adapter kernels move per token per GPU",
            "a_l",
            "b_x * n_x",
            a_l,
            unit="B",
            b_x=ACT_BYTES,
            n_x=a_l / ACT_BYTES,
            note="the shrink reads each targeted layer's input; the expand reads and writes its output",
        )
    pop = a.popularity()
    return {
        "lora_flop_per_token": f_l,
        "lora_bytes_per_adapter": w_l,
        "lora_act_bytes_per_token": a_l,
        "lora_eff": cfg.assumptions.lora_kernel_eff,
        "lora_slots": float(a.slots(engine)),
        "lora_count": float(a.count),
        "lora_popularity": pop if a.skew else (),
        "wrapped_layers": wrapped_layers(mods),
    }


def expected_distinct(slots: float, count: float, popularity, per_adapter_bytes: float, seqs):
    """Expected distinct adapters among ``seqs`` requests drawn from the traffic, at most the ``slots``::

        D(S) = min(K, sum_i 1 - (1 - p_i)^S)        (uniform over N: N (1 - (1 - 1/N)^S))

    ``popularity`` the adapters' shares p_i (empty: uniform over ``count`` = N); 0 without adapters
    (``per_adapter_bytes`` 0); arrays welcome (the closed-form chain; the simulator counts its batch's own)."""
    if not per_adapter_bytes:
        return 0.0 * seqs
    K, N, p = slots, count, popularity
    if isinstance(seqs, (int, float, np.integer, np.floating)):
        s = float(seqs) if seqs > 0 else 0.0
        d = N * (1.0 - (1.0 - 1.0 / N) ** s) if not p else sum(1.0 - (1.0 - q) ** s for q in p)
        return d if d < K else K
    S = np.maximum(np.asarray(seqs, dtype=float), 0.0)
    if not p:
        return np.minimum(K, N * (1.0 - (1.0 - 1.0 / N) ** S))
    u, inv = np.unique(S, return_inverse=True)
    d = (1.0 - (1.0 - np.asarray(p)[None, :]) ** u[:, None]).sum(axis=1)
    return np.minimum(K, d[inv].reshape(S.shape))
