"""Model architectures, counted from first principles (read from a Hugging Face ``config.json`` by
:mod:`core.catalog.hf_config`).

Parameter counts come from the architecture, never from a name: embeddings,
attention (MHA, GQA, MLA), dense and expert MLPs, routers, biases and norms.
A catalog test checks every count against the published figure (within 1%).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from core.base import ARCH_DOMAINS, checked

#: Characters kept in a name taken from a config.json (everything else could render as markup).
_NAME_OK = re.compile(r"[^A-Za-z0-9 ._/+()-]")


def clean_name(s: str, limit: int = 100) -> str:
    """A name taken from a config.json, at most ``limit`` long, every character but letters, digits, spaces and
    ``._/+()-`` replaced by ``_`` (anything else could render as markup)."""
    return _NAME_OK.sub("_", s)[:limit].strip() or "custom"


class ModelArch(BaseModel):
    """A decoder-only transformer, as far as sizing needs it (frozen, hashable).

    Sizes are counts (no unit); ``*_size`` / ``*_dim`` are vector widths.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    slug: str
    name: str
    hidden_size: int = Field(gt=0)
    num_layers: int = Field(gt=0)
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    intermediate_size: int = Field(0, ge=0)  # dense FFN width (dense layers)
    vocab_size: int = Field(gt=0)
    tie_embeddings: bool = False
    mlp_kind: Literal["swiglu", "gelu"] = "swiglu"
    norm_kind: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    attention_bias: bool = False  # q, k, v biases
    attn_out_bias: bool = False  # o-projection bias
    mlp_bias: bool = False
    qk_norm: bool = False
    attention_sinks: bool = False
    learned_pos_embeddings: int = 0  # rows of a learned position table (GPT-2/3 style)
    max_context: int = Field(4096, gt=0)
    # Mixture of experts
    num_experts: int = Field(0, ge=0)
    experts_per_tok: int = Field(0, ge=0)
    moe_intermediate_size: int = Field(0, ge=0)
    num_shared_experts: int = Field(0, ge=0)
    shared_intermediate_size: int = Field(0, ge=0)
    first_dense_layers: int = Field(0, ge=0)
    router_bias: bool = False
    # Multi-head latent attention (DeepSeek-V2/V3)
    q_lora_rank: int = Field(0, ge=0)
    kv_lora_rank: int = Field(0, ge=0)
    qk_nope_head_dim: int = Field(0, ge=0)
    qk_rope_head_dim: int = Field(0, ge=0)
    v_head_dim: int = Field(0, ge=0)
    # Sliding-window attention: ``sliding_layers`` of the layers see only ``sliding_window`` tokens
    sliding_window: int = Field(0, ge=0)
    sliding_layers: int = Field(0, ge=0)
    # State-space (Mamba) layers of a hybrid (Jamba): their mixer replaces attention and holds no KV cache
    ssm_layers: int = Field(0, ge=0)
    ssm_mixer_params: int = Field(0, ge=0)  # parameters of one such mixer
    # the fixed per-sequence state of one such mixer (HF JambaMambaMixer / HybridMambaAttentionDynamicCache):
    # a conv state of d_inner x d_conv and an SSM state of d_inner x d_state, d_inner = mamba_expand x h
    ssm_d_inner: int = Field(0, ge=0)
    ssm_d_conv: int = Field(0, ge=0)
    ssm_d_state: int = Field(0, ge=0)

    @field_validator("slug", "name", mode="before")
    @classmethod
    def _plain_name(cls, v: Any) -> Any:
        """Names come from users (a link, a config.json): letters, digits and ``._/+()-`` only, at most 100.

        Anything else could render as markup where the name is shown (``![x](http://...)`` would make every
        viewer's browser fetch a remote URL).
        """
        return clean_name(v) if isinstance(v, str) else v

    @field_validator(*(f for f in ARCH_DOMAINS if f not in ("num_mamba_layers",)), mode="before")
    @classmethod
    def _in_domain(cls, v: Any, info: Any) -> Any:
        """Every size a whole number inside its finite domain (core.base.limits): no config can make a count loop
        or overflow, and no text, boolean or decimal number stands in for a count (a link's model and a config
        file's are RA-BIT's own form, written with whole numbers; a config.json is read by :func:`from_hf_config`)."""
        return int(checked(v, ARCH_DOMAINS[info.field_name].problem(v)))  # pydantic names the field

    @model_validator(mode="after")
    def _check(self) -> "ModelArch":
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_kv_heads})"
            )
        if self.num_experts and not (0 < self.experts_per_tok <= self.num_experts):
            raise ValueError("num_experts_per_tok must be between 1 and the number of experts")
        if self.num_experts and not self.moe_intermediate_size:
            raise ValueError("an MoE model needs moe_intermediate_size (or intermediate_size)")
        if self.sliding_layers + self.ssm_layers > self.num_layers:
            raise ValueError("more sliding-window and state-space layers than layers")
        if self.ssm_layers >= self.num_layers:
            raise ValueError("no attention layer: every layer is a state-space layer")
        if self.first_dense_layers > self.num_layers:
            raise ValueError("first_k_dense_replace exceeds num_hidden_layers")
        return self

    # --- structure ---------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def attention_kind(self) -> str:
        if self.is_mla:
            return "MLA"
        if self.num_kv_heads == self.num_heads:
            return "MHA"
        if self.num_kv_heads == 1:
            return "MQA"
        return "GQA"

    @property
    def moe_layers(self) -> int:
        return self.num_layers - self.first_dense_layers if self.is_moe else 0

    @property
    def dense_layers(self) -> int:
        return self.num_layers - self.moe_layers

    def splits_heads(self, tp: int) -> bool:
        """Whether tensor parallelism ``tp`` splits the attention heads evenly (each rank a whole number of
        query heads, as Megatron-LM and vLLM require): ``num_heads % tp == 0``."""
        return self.num_heads % tp == 0

    # --- parameter counts ----------------------------------------------------------------------
    def _norm(self) -> int:
        return self.hidden_size * (2 if self.norm_kind == "layernorm" else 1)

    def attention_params(self) -> int:
        """Parameters of one attention block (projections, biases, q/k norms, sinks)."""
        h = self.hidden_size
        if self.is_mla:
            qk_head = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * self.num_heads * qk_head
            else:
                q = h * self.num_heads * qk_head
            kv = (
                h * (self.kv_lora_rank + self.qk_rope_head_dim)
                + self.kv_lora_rank
                + self.kv_lora_rank * self.num_heads * (self.qk_nope_head_dim + self.v_head_dim)
            )
            o = self.num_heads * self.v_head_dim * h
            return q + kv + o
        q_dim = self.num_heads * self.head_dim
        kv_dim = self.num_kv_heads * self.head_dim
        n = h * q_dim + 2 * h * kv_dim + q_dim * h
        if self.attention_bias:
            n += q_dim + 2 * kv_dim
        if self.attn_out_bias:
            n += h
        if self.qk_norm:
            n += 2 * self.head_dim
        if self.attention_sinks:
            n += self.num_heads
        return n

    def _mlp(self, width: int) -> int:
        h = self.hidden_size
        if self.mlp_kind == "swiglu":
            n = 3 * h * width
            if self.mlp_bias:
                n += 2 * width + h
        else:
            n = 2 * h * width
            if self.mlp_bias:
                n += width + h
        return n

    def expert_params(self) -> int:
        """Parameters of one routed expert."""
        return self._mlp(self.moe_intermediate_size) if self.is_moe else 0

    def _moe_fixed(self) -> int:
        """Router and shared experts of one MoE layer."""
        router = self.hidden_size * self.num_experts + (self.num_experts if self.router_bias else 0)
        shared = self.num_shared_experts * self._mlp(self.shared_intermediate_size or self.moe_intermediate_size)
        return router + shared

    def embedding_params(self) -> int:
        """Input token (and learned position) embeddings."""
        return self.vocab_size * self.hidden_size + self.learned_pos_embeddings * self.hidden_size

    def lm_head_params(self) -> int:
        return 0 if self.tie_embeddings else self.vocab_size * self.hidden_size

    def layer_params(self, moe: bool, active: bool = False) -> int:
        n = self.attention_params() + 2 * self._norm()
        if moe:
            k = self.experts_per_tok if active else self.num_experts
            n += k * self.expert_params() + self._moe_fixed()
        else:
            n += self._mlp(self.intermediate_size)
        return n

    def _ssm_delta(self) -> int:
        """State-space layers carry a Mamba mixer instead of attention (Jamba)."""
        return self.ssm_layers * (self.ssm_mixer_params - self.attention_params())

    def total_params(self) -> int:
        """All parameters (embeddings, every layer, final norm, LM head)."""
        return (
            self.embedding_params()
            + self.lm_head_params()
            + self._norm()
            + self.dense_layers * self.layer_params(False)
            + self.moe_layers * self.layer_params(True)
            + self._ssm_delta()
        )

    def active_params(self) -> int:
        """Parameters touched by one token: routed experts counted top-k only."""
        return (
            self.embedding_params()
            + self.lm_head_params()
            + self._norm()
            + self.dense_layers * self.layer_params(False)
            + self.moe_layers * self.layer_params(True, active=True)
            + self._ssm_delta()
        )

    def active_matmul_params(self) -> int:
        """Active parameters that do matrix work per token (input embedding is a lookup).

        A tied embedding still does the LM-head matmul, so it counts once.
        """
        head = self.vocab_size * self.hidden_size
        return self.active_params() - self.embedding_params() - self.lm_head_params() + head

    def quantizable_params(self) -> int:
        """Linear-layer weights inside the blocks: what FP8/INT4/FP4 checkpoints quantise.

        Embeddings, LM head and norms stay in BF16 in published FP8/INT4/MXFP4 checkpoints.
        """
        return (
            self.total_params()
            - self.embedding_params()
            - self.lm_head_params()
            - self._norm() * (2 * self.num_layers + 1)
        )

    # --- attention state -----------------------------------------------------------------------
    @property
    def attention_layers(self) -> int:
        """Layers with attention (full or sliding-window): the layers that cache keys and values and spend
        attention FLOPs. A hybrid's state-space layers (Jamba: 28 of 32) have neither."""
        return self.num_layers - self.ssm_layers

    @property
    def full_attention_layers(self) -> int:
        return self.num_layers - self.sliding_layers - self.ssm_layers

    def ssm_state_elements_per_seq(self) -> int:
        """Elements of the fixed state one sequence holds in the state-space layers, whatever its length.

        Per layer d_inner x (d_conv + d_state) (HF HybridMambaAttentionDynamicCache: conv_states of
        (batch, d_inner, d_conv), ssm_states of (batch, d_inner, d_state)). Jamba-v0.1: 28 x 8,192 x (4 + 16)
        = 4,587,520; 0 for a model without state-space layers.
        """
        return self.ssm_layers * self.ssm_d_inner * (self.ssm_d_conv + self.ssm_d_state)

    def ssm_state_bytes_per_seq(self, bytes_per_elem: float = 2.0) -> float:
        """Bytes of :meth:`ssm_state_elements_per_seq`, kept in the model's dtype (BF16: 2 B, as the HF cache and
        vLLM's default mamba cache dtype keep it). Jamba-v0.1: 9,175,040 B (9.2 MB) per sequence."""
        return self.ssm_state_elements_per_seq() * bytes_per_elem

    def kv_elements_per_token_layer(self) -> int:
        """Cached elements per token per layer: 2 x n_kv x d_head, or the MLA latent (r_kv + d_rope)."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim

    @property
    def attn_qk_dim(self) -> int:
        """H x d_head in the attention FLOP term 4 x L x (H x d_head) x A."""
        if self.is_mla:
            return self.num_heads * (self.qk_nope_head_dim + self.qk_rope_head_dim + self.v_head_dim) // 2
        return self.num_heads * self.head_dim

    def kv_context_tokens(self, context: int) -> float:
        """Tokens held summed over the attention layers, divided by their number (:attr:`attention_layers`,
        the layers the KV bytes per token count): sliding layers hold at most the window."""
        if not self.sliding_layers:
            return float(context)
        w = min(context, self.sliding_window)
        return (self.full_attention_layers * context + self.sliding_layers * w) / self.attention_layers

    def expected_experts_touched(self, tokens: float) -> float:
        """Expected distinct routed experts hit by ``tokens`` tokens with top-k routing, per MoE layer.

        Uniform routing: E x (1 - (1 - k/E)^tokens); 1 token touches exactly k.
        """
        if not self.is_moe:
            return 0.0
        e, k = self.num_experts, self.experts_per_tok
        return e * (1.0 - (1.0 - k / e) ** max(tokens, 0.0))
