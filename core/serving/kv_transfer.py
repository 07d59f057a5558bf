"""The KV cache of a prompt moving from a prefill instance to a decode instance (disaggregated serving).

Each GPU of the prefill instance sends the KV it holds (its KV heads of its pipeline stage's layers) and each GPU
of the decode instance receives the KV it will hold, all over their own links at once, so the wire time is set by
the side whose GPUs hold more of it::

    t = t_setup + alpha + I x max(k_p, k_d) / (beta x eta)

with ``I`` the prompt's tokens, ``k_p`` / ``k_d`` the KV bytes per token one GPU of each side holds (at the KV
dtype: :func:`core.physics.serving_memory`'s ``kv_bytes_per_token_per_gpu``: the layers of its stage, its share of
the KV heads), ``beta`` the per-GPU bandwidth of the path and ``alpha`` its latency, ``eta`` the achieved share of
that bandwidth (assumption ``kv_transfer_eff``) and ``t_setup`` the connector's fixed cost per transfer
(``kv_transfer_setup_us``). The path (:func:`kv_path`) is the scale-up fabric (NVLink) when both instances are of
one GPU kind and fit one scale-up domain together, else the inter-node fabric (per GPU, one NIC per GPU).

Transfers that overlap on one prefill instance share its links (processor sharing, in
:mod:`core.serving.sim.replicas`), and a transfer overlapped layer by layer with the prefill (vLLM's and
Mooncake's layer-wise send, Splitwise's layer-wise transfer) leaves only what the prefill did not hide:
``max(t_wire / L, t_wire - t_prefill)`` of the wire time, at least one stage layer's share.

Worked number: Llama-3.1-8B, BF16 KV (131,072 B per token over 32 layers), TP 1 both sides, a 4,096-token prompt
over InfiniBand NDR (50 GB/s per GPU, 3.5 us): ``4,096 x 131,072 = 537 MB``; at 70 % of 50 GB/s 15.3 ms, plus
0.5 ms of setup: 15.8 ms.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from core.base import NO_TRACE, Trace
from core.catalog import Fabric, GpuSpec


class KvPath(BaseModel):
    """The path a prompt's KV takes between the two pools: its name, per-GPU bandwidth and latency."""

    model_config = ConfigDict(frozen=True)

    name: str  # "NVLink" (scale-up fabric) or the fabric's name
    bw_bytes_per_s: float  # per GPU, per direction
    latency_s: float
    same_node: bool


def kv_path(prefill_gpu: GpuSpec, decode_gpu: GpuSpec, prefill_gpus: int, decode_gpus: int, fabric: Fabric) -> KvPath:
    """The scale-up fabric when both instances are of one GPU kind and fit one scale-up domain together (a
    prefill and a decode instance in one node), else the inter-node fabric."""
    if prefill_gpu.slug == decode_gpu.slug and prefill_gpus + decode_gpus <= prefill_gpu.nvlink_domain:
        return KvPath(
            name=prefill_gpu.scale_up,
            bw_bytes_per_s=prefill_gpu.scale_up_bw_gb_per_s * 1e9,
            latency_s=prefill_gpu.scale_up_latency_us * 1e-6,
            same_node=True,
        )
    return KvPath(
        name=fabric.name, bw_bytes_per_s=fabric.bw_gb_per_s * 1e9, latency_s=fabric.latency_us * 1e-6, same_node=False
    )


def kv_transfer_s(
    tokens: float,
    k_prefill_bytes: float,
    k_decode_bytes: float,
    bw_bytes_per_s: float,
    latency_s: float,
    eff: float,
    setup_s: float,
    trace: Trace = NO_TRACE,
):
    """Time to move one prompt's KV cache [s] (scalars or arrays of ``tokens``; see the module docstring).

    ``tokens`` [tokens]; ``k_prefill_bytes`` / ``k_decode_bytes`` KV per token held by one GPU of each side [B];
    ``bw_bytes_per_s`` per GPU [B/s]; ``latency_s``, ``setup_s`` [s]; ``eff`` achieved share of the bandwidth.
    """
    k = max(k_prefill_bytes, k_decode_bytes)
    value = setup_s + latency_s + tokens * k / (bw_bytes_per_s * eff)
    return trace.step(
        "kv_transfer_s",
        "KV transfer of one prompt",
        "t_kv",
        "t_setup + alpha + I * k_max / (beta * eta)",
        value,
        unit="s",
        latex=r"t_{setup} + \alpha + \frac{[I] \cdot k_{max}}{\beta \cdot \eta}",
        t_setup=setup_s,
        alpha=latency_s,
        I=tokens,
        k_max=k,
        beta=bw_bytes_per_s,
        eta=eff,
    )


def wire_share(wire_s: float, prefill_s: float, stage_layers: int, overlap: bool) -> float:
    """Share of the wire time left after the prefill when the transfer runs layer by layer alongside it:
    ``max(1 / L, 1 - t_prefill / t_wire)``; 1 without overlap."""
    if not overlap or wire_s <= 0:
        return 1.0
    return max(1.0 / max(stage_layers, 1), 1.0 - prefill_s / wire_s)
