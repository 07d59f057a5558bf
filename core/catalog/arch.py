"""Model architectures: parsed from Hugging Face ``config.json`` data, counted from first principles.

Parameter counts come from the architecture, never from a name: embeddings,
attention (MHA, GQA, MLA), dense and expert MLPs, routers, biases and norms.
A catalog test checks every count against the published figure (within 1%).
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal, overload

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from core.base import ARCH_DOMAINS, checked


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
        return _clean_name(v) if isinstance(v, str) else v

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


#: Architectures RA-BIT cannot size, by ``model_type``, with why (the message a user sees).
UNSUPPORTED: dict[str, str] = {
    **{
        t: "an encoder-only model: it produces embeddings, not generated tokens, so there is no decode or "
        "KV cache to size"
        for t in (
            "bert",
            "roberta",
            "xlm-roberta",
            "deberta",
            "deberta-v2",
            "distilbert",
            "electra",
            "albert",
            "camembert",
            "modernbert",
            "mpnet",
            "nomic_bert",
        )
    },
    **{
        t: "an encoder-decoder model: its cross-attention and encoder pass are not modelled"
        for t in ("t5", "mt5", "umt5", "bart", "mbart", "pegasus", "marian", "whisper", "longt5", "switch_transformers")
    },
    **{
        t: "a pure state-space model: it has no attention layers, and its recurrent state is not modelled"
        for t in ("mamba", "mamba2", "falcon_mamba")
    },
    "rwkv": "a recurrent (RWKV) model: it has no attention layers, and its recurrent state is not modelled",
    "rwkv5": "a recurrent (RWKV) model: it has no attention layers, and its recurrent state is not modelled",
    "rwkv6": "a recurrent (RWKV) model: it has no attention layers, and its recurrent state is not modelled",
    "xlnet": "a permutation language model with two-stream attention, which is not modelled",
}
#: Characters kept in a name taken from a config.json (everything else could render as markup).
_NAME_OK = re.compile(r"[^A-Za-z0-9 ._/+()-]")


class UnsupportedArchitecture(ValueError):
    """A config.json of a family RA-BIT cannot size (the message names it and says why)."""


def _unsupported(arch: str, why: str) -> UnsupportedArchitecture:
    return UnsupportedArchitecture(f"unsupported architecture: {arch} ({why})")


def _get(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return cfg[k]
    return default


@overload
def _int(cfg: dict[str, Any], *keys: str, default: int, field: str | None = None) -> int: ...
@overload
def _int(cfg: dict[str, Any], *keys: str, default: None = None, field: str | None = None) -> int | None: ...
def _int(cfg: dict[str, Any], *keys: str, default: int | None = None, field: str | None = None) -> int | None:
    """The first present key as an integer inside its domain; a wrong type is refused by name.

    ``true`` is not 1, ``"4096"`` is not 4096, 4096.0 is 4096.
    """
    for k in keys:
        if k in cfg and cfg[k] is not None:
            v = cfg[k]
            if isinstance(v, float) and math.isfinite(v) and v.is_integer():
                v = int(v)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"config.json field '{k}' must be an integer, not {type(v).__name__} {_short(v)}")
            dom = ARCH_DOMAINS.get(field or k)
            if dom is not None:
                dom.check(f"config.json field '{k}'", v)
            elif not 0 <= v <= 2**40:
                raise ValueError(f"config.json field '{k}': {v} is out of range")
            return v
    return default


def _bool(cfg: dict[str, Any], key: str, default: bool) -> bool:
    v = cfg.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise ValueError(f"config.json field '{key}' must be true or false, not {type(v).__name__} {_short(v)}")
    return v


def _str(cfg: dict[str, Any], key: str) -> str:
    v = cfg.get(key)
    if v is None:
        return ""
    if not isinstance(v, str):
        raise ValueError(f"config.json field '{key}' must be a string, not {type(v).__name__} {_short(v)}")
    return v


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 30 else r[:27] + "..."


def _clean_name(s: str, limit: int = 100) -> str:
    return _NAME_OK.sub("_", s)[:limit].strip() or "custom"


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The language model's config: the top level, or the nested ``text_config`` of a multimodal model
    (Gemma 3, Llama 4, LLaVA-style) with the top level's naming keys carried over."""
    inner = cfg.get("text_config")
    if "hidden_size" in cfg or "n_embd" in cfg or "d_model" in cfg or inner is None:
        return cfg
    if not isinstance(inner, dict):
        raise ValueError("config.json field 'text_config' must be a JSON object")
    out = dict(inner)
    for k in ("_name_or_path", "tie_word_embeddings"):
        if k in cfg and k not in out:
            out[k] = cfg[k]
    out.setdefault("architectures", cfg.get("architectures"))
    return out


def _ssm_sizes(cfg: dict[str, Any], h: int) -> tuple[int, int, int]:
    """(d_inner, d_state, d_conv) of a Jamba Mamba mixer: d_inner = mamba_expand x h (HF JambaConfig defaults
    2, 16 and 4)."""
    e = _int(cfg, "mamba_expand", default=2, field="num_mamba_layers") * h
    ARCH_DOMAINS["ssm_d_inner"].check("config.json: mamba_expand x hidden_size", e)
    n = _int(cfg, "mamba_d_state", default=16, field="ssm_d_state")
    conv = _int(cfg, "mamba_d_conv", default=4, field="ssm_d_conv")
    return e, n, conv


def _ssm_mixer_params(cfg: dict[str, Any], h: int) -> int:
    """Parameters of one Mamba mixer as in Jamba (Lieber et al., arXiv 2403.19887; HF JambaMambaMixer).

    in_proj h x 2E, conv1d E x (d_conv + 1), x_proj E x (R + 2N), dt_proj R x E + E, A_log E x N, D E,
    out_proj E x h, and the dt/B/C RMSNorms R + 2N; E = expand x h, N = d_state, R = dt_rank.
    """
    e, n, conv = _ssm_sizes(cfg, h)
    auto = cfg.get("mamba_dt_rank") == "auto"  # HF JambaConfig: "auto" is ceil(h / 16)
    rank = math.ceil(h / 16) if auto else _int(cfg, "mamba_dt_rank", default=math.ceil(h / 16), field="hidden_size")
    conv_bias = _bool(cfg, "mamba_conv_bias", True)
    proj_bias = _bool(cfg, "mamba_proj_bias", False)
    return (
        h * 2 * e
        + (2 * e if proj_bias else 0)
        + e * conv
        + (e if conv_bias else 0)
        + e * (rank + 2 * n)
        + rank * e
        + e
        + e * n
        + e
        + e * h
        + (h if proj_bias else 0)
        + rank
        + 2 * n
    )


def _gated_deltanet(cfg: dict[str, Any], h: int, layers: int, lt: list[str] | None) -> tuple[int, int, int, int, int]:
    """Qwen3-Next's linear-attention layers (Gated DeltaNet, Yang et al. arXiv 2412.06464), sized as state-space
    layers: ``(layers, mixer params, d_inner, d_conv, d_state)``.

    Every ``full_attention_interval``-th layer keeps softmax attention and a KV cache; the others hold a fixed state
    per sequence: a causal-convolution state of conv_dim x kernel (conv_dim = 2 H_k d_k + H_v d_v) and a recurrent
    state of H_v x d_k x d_v (transformers Qwen3NextGatedDeltaNet / Qwen3NextDynamicCache), here as
    d_inner = conv_dim and d_state = H_v d_k d_v / conv_dim so that d_inner x (d_conv + d_state) is both. Mixer
    parameters: in_proj_qkvz h x (2 H_k d_k + 2 H_v d_v), in_proj_ba h x 2 H_v, conv1d conv_dim x kernel, dt_bias and
    A_log H_v each, the gated RMSNorm d_v, out_proj H_v d_v x h. Qwen3-Next-80B-A3B: 36 of 48 layers, 33,718,464
    parameters and 557,056 state elements each.
    """
    if lt:
        n = sum(1 for t in lt[:layers] if "linear" in t)
    else:
        interval = _int(cfg, "full_attention_interval", default=4, field="num_layers") or 1
        n = layers - layers // interval
    hk = _int(cfg, "linear_num_key_heads", default=16, field="num_heads")
    hv = _int(cfg, "linear_num_value_heads", default=32, field="num_heads")
    dk = _int(cfg, "linear_key_head_dim", default=128, field="head_dim")
    dv = _int(cfg, "linear_value_head_dim", default=128, field="head_dim")
    kernel = _int(cfg, "linear_conv_kernel_dim", default=4, field="ssm_d_conv")
    conv_dim = 2 * hk * dk + hv * dv
    ARCH_DOMAINS["ssm_d_inner"].check("config.json: 2 x linear key dim + linear value dim", conv_dim)
    state = hv * dk * dv // conv_dim
    params = h * (2 * hk * dk + 2 * hv * dv) + h * 2 * hv + conv_dim * kernel + 2 * hv + dv + hv * dv * h
    return n, params, conv_dim, kernel, state


def from_hf_config(cfg: dict[str, Any], slug: str | None = None, name: str | None = None) -> ModelArch:
    """Build a :class:`ModelArch` from a Hugging Face ``config.json`` dictionary.

    Understands Llama/Mistral/Mixtral/Qwen2/Qwen3(-MoE)/DeepSeek-V3/gpt-oss, GPT-2-style keys
    (``n_embd``, ``n_layer``, ``n_head``), Falcon (multi-query and grouped attention, parallel block),
    Jamba (attention + Mamba layers, MoE every other layer), and multimodal configs whose language
    model sits in ``text_config`` (Gemma 3, Llama 4; sized as the text model, the vision encoder
    is not counted). Raises ``ValueError`` naming the missing or wrong-typed key, and
    :class:`UnsupportedArchitecture` for encoder-only, encoder-decoder and recurrent models.
    """
    if not isinstance(cfg, dict):
        raise ValueError("config.json must hold a JSON object")
    archs = cfg.get("architectures")
    if archs is not None and not (isinstance(archs, list) and all(isinstance(a, str) for a in archs)):
        raise ValueError("config.json field 'architectures' must be a list of names")
    top_type = _str(cfg, "model_type").lower()
    arch_name = _clean_name((archs or [""])[0] if archs else "") if archs else ""
    label = arch_name or top_type or "unknown"
    if top_type in UNSUPPORTED:
        raise _unsupported(label, UNSUPPORTED[top_type])
    if _bool(cfg, "is_encoder_decoder", False):
        raise _unsupported(label, "an encoder-decoder model: its cross-attention and encoder pass are not modelled")
    if any(a.endswith(("ForMaskedLM", "ForSequenceClassification", "ForTokenClassification")) for a in archs or []):
        raise _unsupported(label, "an encoder-only model: it produces embeddings or labels, not generated tokens")
    cfg = _text_config(cfg)
    mtype = _str(cfg, "model_type").lower() or top_type
    if mtype in UNSUPPORTED:
        raise _unsupported(label, UNSUPPORTED[mtype])
    lt = cfg.get("layer_types")
    if lt is not None and not (isinstance(lt, list) and all(isinstance(t, str) for t in lt)):
        raise ValueError("config.json field 'layer_types' must be a list of strings")
    arch = ((cfg.get("architectures") or [""])[0]) if isinstance(cfg.get("architectures"), list) else ""
    arch = arch if isinstance(arch, str) else ""
    gpt2_style = "n_embd" in cfg or mtype in ("gpt2", "gpt3")
    falcon = mtype in ("falcon", "refinedweb", "refinedwebmodel") or arch.startswith(("Falcon", "RW"))
    jamba = mtype == "jamba"
    qwen3_next = mtype == "qwen3_next"
    llama4 = mtype in ("llama4_text", "llama4")
    gemma = mtype.startswith("gemma")
    h = _int(cfg, "hidden_size", "n_embd", "d_model", field="hidden_size")
    layers = _int(cfg, "num_hidden_layers", "n_layer", "num_layers", field="num_layers")
    heads = _int(cfg, "num_attention_heads", "n_head", field="num_heads")
    vocab = _int(cfg, "vocab_size", field="vocab_size")
    for key, val in (
        ("hidden_size", h),
        ("num_hidden_layers", layers),
        ("num_attention_heads", heads),
        ("vocab_size", vocab),
    ):
        if val is None:
            raise ValueError(
                f"config.json is missing '{key}'"
                + (
                    f" (for {label}: the keys may sit in a nested config RA-BIT does not know)"
                    if any(isinstance(v, dict) for v in cfg.values())
                    else ""
                )
            )
    assert h is not None and layers is not None and heads is not None and vocab is not None
    if falcon:
        if _bool(cfg, "new_decoder_architecture", False):
            kv = _int(cfg, "num_kv_heads", "n_head_kv", default=heads, field="num_kv_heads")
        elif _bool(cfg, "multi_query", True):
            kv = 1
        else:
            kv = heads
    else:
        kv = _int(cfg, "num_key_value_heads", "num_kv_heads", default=heads, field="num_kv_heads")
    head_dim = _int(cfg, "head_dim", default=h // heads, field="head_dim")
    if not head_dim:
        raise ValueError(f"config.json: hidden_size {h} is smaller than num_attention_heads {heads}; give head_dim")
    n_experts = _int(cfg, "n_routed_experts", "num_local_experts", "num_experts", default=0, field="num_experts")
    moe_inter = _int(cfg, "moe_intermediate_size", default=0, field="moe_intermediate_size")
    inter = _int(
        cfg, "intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size", default=0, field="intermediate_size"
    )
    n_shared = _int(cfg, "n_shared_experts", default=0, field="num_shared_experts")
    shared_inter = _int(cfg, "shared_expert_intermediate_size", default=0, field="shared_intermediate_size")
    if qwen3_next and shared_inter and not n_shared:
        n_shared = 1  # Qwen3-Next: one gated shared expert of shared_expert_intermediate_size beside the routed ones
    first_dense = _int(cfg, "first_k_dense_replace", default=0, field="first_dense_layers")
    if (gpt2_style or falcon) and not inter:
        inter = 4 * h
    if llama4:
        # Llama 4: every ``interleave_moe_layer_step``-th layer is MoE (routed experts of intermediate_size
        # plus one shared expert); the others are dense of intermediate_size_mlp (Meta, Llama 4 model card).
        step = _int(cfg, "interleave_moe_layer_step", default=1, field="num_layers") or 1
        moe_inter, n_shared = inter, 1
        first_dense = layers - layers // step
        inter = _int(cfg, "intermediate_size_mlp", default=inter, field="intermediate_size")
    if jamba and n_experts:
        # Jamba: layer i is MoE when i % expert_layer_period == expert_layer_offset (arXiv 2403.19887)
        period = _int(cfg, "expert_layer_period", default=2, field="num_layers") or 1
        offset = _int(cfg, "expert_layer_offset", default=1, field="num_layers")
        first_dense = layers - sum(1 for i in range(layers) if i % period == offset)
    if n_experts and not moe_inter:
        moe_inter = inter
    ssm_layers = ssm_params = ssm_inner = ssm_state = ssm_conv = 0
    if jamba:
        period = _int(cfg, "attn_layer_period", default=8, field="num_layers") or 1
        offset = _int(cfg, "attn_layer_offset", default=4, field="num_layers")
        ssm_layers = layers - sum(1 for i in range(layers) if i % period == offset)
        if ssm_layers >= layers:
            raise _unsupported(
                label,
                f"attn_layer_offset {offset} never matches a layer of period {period}: with no attention layer "
                "it is a pure state-space model",
            )
        ssm_params = _ssm_mixer_params(cfg, h)
        ssm_inner, ssm_state, ssm_conv = _ssm_sizes(cfg, h)
    if qwen3_next:
        ssm_layers, ssm_params, ssm_inner, ssm_conv, ssm_state = _gated_deltanet(cfg, h, layers, lt)
    max_ctx = _int(
        cfg,
        "max_position_embeddings",
        "n_positions",
        "n_ctx",
        default=4096 if not falcon else 2048,
        field="max_context",
    )
    assert max_ctx is not None
    sliding_window = _int(cfg, "sliding_window", default=0, field="sliding_window") or 0
    chunk = _int(cfg, "attention_chunk_size", default=0, field="sliding_window") if llama4 else 0
    local = 0
    if chunk:
        # Llama 4's iRoPE: the RoPE layers attend within chunks of attention_chunk_size tokens, every
        # no_rope_layer_interval-th layer (NoPE) attends globally (transformers Llama4TextConfig: no_rope_layers[i] =
        # (i + 1) % interval != 0). A chunked layer holds at most one chunk of keys, like a window of that size
        # (vLLM allocates it as one: ChunkedLocalAttention).
        sliding_window = chunk
        rope = cfg.get("no_rope_layers")
        if isinstance(rope, list) and rope and all(isinstance(x, int) and not isinstance(x, bool) for x in rope):
            local = sum(1 for x in rope[:layers] if x)
        else:
            interval = _int(cfg, "no_rope_layer_interval", default=4, field="num_layers") or 1
            local = layers - layers // interval
    if chunk and not lt:
        sliding_layers = local
    elif lt:
        sliding_layers = sum(1 for t in lt if "sliding" in t or "chunked" in t)
    elif sliding_window and cfg.get("sliding_window_pattern"):
        pattern = _int(cfg, "sliding_window_pattern", field="num_layers") or 1
        sliding_layers = layers - layers // pattern  # Gemma 3: every pattern-th layer is global
    elif sliding_window and _bool(cfg, "use_sliding_window", True) and sliding_window < max_ctx:
        sliding_layers = layers
    else:
        sliding_layers = 0
    if not sliding_layers:
        sliding_window = 0
    sliding_layers = min(sliding_layers, layers - ssm_layers)
    is_gpt_oss = mtype == "gpt_oss" or "GptOss" in arch
    bias = _bool(cfg, "bias", False) if falcon else False
    raw_name = _str(cfg, "_name_or_path")
    return ModelArch(
        slug=_clean_name(slug or (raw_name or mtype or "custom").split("/")[-1].lower()),
        name=_clean_name(name or raw_name or arch or mtype or "custom model"),
        hidden_size=h,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=head_dim,
        intermediate_size=inter,
        vocab_size=vocab,
        tie_embeddings=_bool(cfg, "tie_word_embeddings", gpt2_style or falcon or gemma),
        mlp_kind="gelu" if gpt2_style or falcon else "swiglu",
        norm_kind="layernorm" if gpt2_style or falcon else "rmsnorm",
        attention_bias=_bool(cfg, "attention_bias", False) or mtype == "qwen2" or gpt2_style or is_gpt_oss or bias,
        attn_out_bias=bool(gpt2_style or is_gpt_oss or bias),
        mlp_bias=_bool(cfg, "mlp_bias", False) or gpt2_style or is_gpt_oss or bias,
        qk_norm=mtype in ("qwen3", "qwen3_moe", "qwen3_next") or mtype.startswith("gemma3"),
        attention_sinks=is_gpt_oss,
        learned_pos_embeddings=(_int(cfg, "n_positions", default=0, field="learned_pos_embeddings") or 0)
        if gpt2_style
        else 0,
        max_context=max_ctx,
        num_experts=n_experts,
        experts_per_tok=_int(cfg, "num_experts_per_tok", "experts_per_token", default=0, field="experts_per_tok"),
        moe_intermediate_size=moe_inter,
        num_shared_experts=n_shared,
        shared_intermediate_size=shared_inter,
        first_dense_layers=first_dense,
        router_bias=is_gpt_oss,
        q_lora_rank=_int(cfg, "q_lora_rank", default=0),
        kv_lora_rank=_int(cfg, "kv_lora_rank", default=0),
        qk_nope_head_dim=_int(cfg, "qk_nope_head_dim", default=0),
        qk_rope_head_dim=_int(cfg, "qk_rope_head_dim", default=0),
        v_head_dim=_int(cfg, "v_head_dim", default=0),
        sliding_window=sliding_window,
        sliding_layers=sliding_layers,
        ssm_layers=ssm_layers,
        ssm_mixer_params=ssm_params,
        ssm_d_inner=ssm_inner,
        ssm_d_conv=ssm_conv,
        ssm_d_state=ssm_state,
    )
