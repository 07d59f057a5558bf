"""Model architectures: parsed from Hugging Face ``config.json`` data, counted from first principles.

Parameter counts come from the architecture, never from a name: embeddings,
attention (MHA, GQA, MLA), dense and expert MLPs, routers, biases and norms.
A catalog test checks every count against the published figure (within 1%).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


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

    @model_validator(mode="after")
    def _check(self) -> "ModelArch":
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_attention_heads ({self.num_heads}) must be a multiple of "
                             f"num_key_value_heads ({self.num_kv_heads})")
        if self.num_experts and not (0 < self.experts_per_tok <= self.num_experts):
            raise ValueError("num_experts_per_tok must be between 1 and the number of experts")
        if self.num_experts and not self.moe_intermediate_size:
            raise ValueError("an MoE model needs moe_intermediate_size (or intermediate_size)")
        if self.sliding_layers > self.num_layers:
            raise ValueError("more sliding-window layers than layers")
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
            kv = (h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
                  + self.kv_lora_rank * self.num_heads * (self.qk_nope_head_dim + self.v_head_dim))
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

    def total_params(self) -> int:
        """All parameters (embeddings, every layer, final norm, LM head)."""
        return (self.embedding_params() + self.lm_head_params() + self._norm()
                + self.dense_layers * self.layer_params(False) + self.moe_layers * self.layer_params(True))

    def active_params(self) -> int:
        """Parameters touched by one token: routed experts counted top-k only."""
        return (self.embedding_params() + self.lm_head_params() + self._norm()
                + self.dense_layers * self.layer_params(False)
                + self.moe_layers * self.layer_params(True, active=True))

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
        return self.total_params() - self.embedding_params() - self.lm_head_params() - self._norm() * (
            2 * self.num_layers + 1)

    # --- attention state -----------------------------------------------------------------------
    @property
    def full_attention_layers(self) -> int:
        return self.num_layers - self.sliding_layers

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
        """Tokens held summed over layers, divided by L: sliding layers hold at most the window."""
        if not self.sliding_layers:
            return float(context)
        w = min(context, self.sliding_window)
        return (self.full_attention_layers * context + self.sliding_layers * w) / self.num_layers

    def expected_experts_touched(self, tokens: float) -> float:
        """Expected distinct routed experts hit by ``tokens`` tokens with top-k routing, per MoE layer.

        Uniform routing: E x (1 - (1 - k/E)^tokens); 1 token touches exactly k.
        """
        if not self.is_moe:
            return 0.0
        e, k = self.num_experts, self.experts_per_tok
        return e * (1.0 - (1.0 - k / e) ** max(tokens, 0.0))


def _get(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return cfg[k]
    return default


def from_hf_config(cfg: dict[str, Any], slug: str | None = None, name: str | None = None) -> ModelArch:
    """Build a :class:`ModelArch` from a Hugging Face ``config.json`` dictionary.

    Understands Llama/Mistral/Mixtral/Qwen2/Qwen3(-MoE)/DeepSeek-V3/gpt-oss and GPT-2-style keys
    (``n_embd``, ``n_layer``, ``n_head``). Raises ``ValueError`` naming the missing key.
    """
    if not isinstance(cfg, dict):
        raise ValueError("config.json must hold a JSON object")
    arch = (cfg.get("architectures") or [""])[0]
    mtype = str(cfg.get("model_type", "")).lower()
    gpt2_style = "n_embd" in cfg or mtype in ("gpt2", "gpt3")
    h = _get(cfg, "hidden_size", "n_embd", "d_model")
    layers = _get(cfg, "num_hidden_layers", "n_layer", "num_layers")
    heads = _get(cfg, "num_attention_heads", "n_head")
    for key, val in (("hidden_size", h), ("num_hidden_layers", layers), ("num_attention_heads", heads),
                     ("vocab_size", cfg.get("vocab_size"))):
        if val is None:
            raise ValueError(f"config.json is missing '{key}'")
    kv = _get(cfg, "num_key_value_heads", default=heads)
    head_dim = _get(cfg, "head_dim", default=h // heads)
    n_experts = int(_get(cfg, "n_routed_experts", "num_local_experts", "num_experts", default=0) or 0)
    moe_inter = int(_get(cfg, "moe_intermediate_size", default=0) or 0)
    inter = int(_get(cfg, "intermediate_size", "n_inner", "ffn_dim", default=0) or 0)
    if gpt2_style and not inter:
        inter = 4 * h
    if n_experts and not moe_inter:
        moe_inter = inter
    sliding_window = int(_get(cfg, "sliding_window", default=0) or 0)
    layer_types = cfg.get("layer_types")
    if layer_types:
        sliding_layers = sum(1 for t in layer_types if "sliding" in str(t))
    elif sliding_window and cfg.get("use_sliding_window", True) and sliding_window < int(
            _get(cfg, "max_position_embeddings", default=10**9)):
        sliding_layers = layers
    else:
        sliding_layers = 0
    if not sliding_layers:
        sliding_window = 0
    is_gpt_oss = mtype == "gpt_oss" or "GptOss" in arch
    return ModelArch(
        slug=slug or str(cfg.get("_name_or_path", mtype or "custom")).split("/")[-1].lower(),
        name=name or str(cfg.get("_name_or_path", arch or mtype or "custom model")),
        hidden_size=h, num_layers=layers, num_heads=heads, num_kv_heads=kv, head_dim=head_dim,
        intermediate_size=inter, vocab_size=cfg["vocab_size"],
        tie_embeddings=bool(cfg.get("tie_word_embeddings", gpt2_style)),
        mlp_kind="gelu" if gpt2_style else "swiglu",
        norm_kind="layernorm" if gpt2_style else "rmsnorm",
        attention_bias=bool(cfg.get("attention_bias", False) or mtype == "qwen2" or gpt2_style or is_gpt_oss),
        attn_out_bias=bool(gpt2_style or is_gpt_oss),
        mlp_bias=bool(cfg.get("mlp_bias", False) or gpt2_style or is_gpt_oss),
        qk_norm=mtype in ("qwen3", "qwen3_moe"),
        attention_sinks=is_gpt_oss,
        learned_pos_embeddings=int(_get(cfg, "n_positions", default=0) or 0) if gpt2_style else 0,
        max_context=int(_get(cfg, "max_position_embeddings", "n_positions", "n_ctx", default=4096)),
        num_experts=n_experts,
        experts_per_tok=int(_get(cfg, "num_experts_per_tok", "experts_per_token", default=0) or 0),
        moe_intermediate_size=moe_inter,
        num_shared_experts=int(_get(cfg, "n_shared_experts", default=0) or 0),
        shared_intermediate_size=int(_get(cfg, "shared_expert_intermediate_size", default=0) or 0),
        first_dense_layers=int(_get(cfg, "first_k_dense_replace", default=0) or 0),
        router_bias=is_gpt_oss,
        q_lora_rank=int(_get(cfg, "q_lora_rank", default=0) or 0),
        kv_lora_rank=int(_get(cfg, "kv_lora_rank", default=0) or 0),
        qk_nope_head_dim=int(_get(cfg, "qk_nope_head_dim", default=0) or 0),
        qk_rope_head_dim=int(_get(cfg, "qk_rope_head_dim", default=0) or 0),
        v_head_dim=int(_get(cfg, "v_head_dim", default=0) or 0),
        sliding_window=sliding_window, sliding_layers=sliding_layers,
    )

