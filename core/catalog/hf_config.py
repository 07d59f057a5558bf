"""Reading a Hugging Face ``config.json`` into a :class:`core.catalog.arch.ModelArch`.

Which families it refuses and why, each field read as an integer, boolean or string inside its domain
(:data:`core.base.ARCH_DOMAINS`) and refused by name otherwise, and the families whose sizes sit under other keys
or follow their own layer patterns: GPT-2 and Falcon keys, Llama 4's interleaved MoE and chunked attention, Jamba's
Mamba and MoE layers, Qwen3-Next's Gated DeltaNet, Gemma 3's sliding layers, a multimodal model's ``text_config``.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, overload

from core.base import ARCH_DOMAINS
from core.catalog.arch import ModelArch, clean_name

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


class _Family(NamedTuple):
    """The families whose keys or layer patterns differ from Llama's, told from ``model_type`` and the class name."""

    mtype: str
    arch: str
    gpt2_style: bool
    falcon: bool
    jamba: bool
    qwen3_next: bool
    llama4: bool
    gemma: bool
    gpt_oss: bool


class _Mlp(NamedTuple):
    """The MLP widths and the expert layout."""

    inter: int
    n_experts: int
    moe_inter: int
    n_shared: int
    shared_inter: int
    first_dense: int


class _StateLayers(NamedTuple):
    """A hybrid's state-space (or linear-attention) layers: how many, and one mixer's parameters and state sizes."""

    layers: int = 0
    params: int = 0
    inner: int = 0
    conv: int = 0
    state: int = 0


def _refuse(cfg: dict[str, Any]) -> tuple[str, str]:
    """(the label messages name the model by, the top-level ``model_type``); refuses what cannot be sized: an
    unsupported ``model_type``, an encoder-decoder, an encoder-only head."""
    if not isinstance(cfg, dict):
        raise ValueError("config.json must hold a JSON object")
    archs = cfg.get("architectures")
    if archs is not None and not (isinstance(archs, list) and all(isinstance(a, str) for a in archs)):
        raise ValueError("config.json field 'architectures' must be a list of names")
    top_type = _str(cfg, "model_type").lower()
    arch_name = clean_name((archs or [""])[0] if archs else "") if archs else ""
    label = arch_name or top_type or "unknown"
    if top_type in UNSUPPORTED:
        raise _unsupported(label, UNSUPPORTED[top_type])
    if _bool(cfg, "is_encoder_decoder", False):
        raise _unsupported(label, "an encoder-decoder model: its cross-attention and encoder pass are not modelled")
    if any(a.endswith(("ForMaskedLM", "ForSequenceClassification", "ForTokenClassification")) for a in archs or []):
        raise _unsupported(label, "an encoder-only model: it produces embeddings or labels, not generated tokens")
    return label, top_type


def _family(cfg: dict[str, Any], top_type: str, label: str) -> _Family:
    """The language model's family (after :func:`_text_config`), refusing an unsupported one."""
    mtype = _str(cfg, "model_type").lower() or top_type
    if mtype in UNSUPPORTED:
        raise _unsupported(label, UNSUPPORTED[mtype])
    lt = cfg.get("layer_types")
    if lt is not None and not (isinstance(lt, list) and all(isinstance(t, str) for t in lt)):
        raise ValueError("config.json field 'layer_types' must be a list of strings")
    arch = ((cfg.get("architectures") or [""])[0]) if isinstance(cfg.get("architectures"), list) else ""
    arch = arch if isinstance(arch, str) else ""
    return _Family(
        mtype=mtype,
        arch=arch,
        gpt2_style="n_embd" in cfg or mtype in ("gpt2", "gpt3"),
        falcon=mtype in ("falcon", "refinedweb", "refinedwebmodel") or arch.startswith(("Falcon", "RW")),
        jamba=mtype == "jamba",
        qwen3_next=mtype == "qwen3_next",
        llama4=mtype in ("llama4_text", "llama4"),
        gemma=mtype.startswith("gemma"),
        gpt_oss=mtype == "gpt_oss" or "GptOss" in arch,
    )


def _required(cfg: dict[str, Any], label: str) -> tuple[int, int, int, int]:
    """(hidden size, layers, attention heads, vocabulary), under any family's keys; a missing one is named."""
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
    return h, layers, heads, vocab


def _kv_heads(cfg: dict[str, Any], fam: _Family, heads: int) -> int:
    """Key/value heads: Falcon's multi-query (1) or grouped (new decoder architecture) attention, else the
    ``num_key_value_heads`` of grouped-query attention (all heads when absent)."""
    if not fam.falcon:
        return _int(cfg, "num_key_value_heads", "num_kv_heads", default=heads, field="num_kv_heads")
    if _bool(cfg, "new_decoder_architecture", False):
        return _int(cfg, "num_kv_heads", "n_head_kv", default=heads, field="num_kv_heads")
    return 1 if _bool(cfg, "multi_query", True) else heads


def _mlp(cfg: dict[str, Any], fam: _Family, h: int, layers: int) -> _Mlp:
    """The dense and expert MLP widths, the shared experts and the dense layers before (or between) the MoE ones."""
    n_experts = _int(cfg, "n_routed_experts", "num_local_experts", "num_experts", default=0, field="num_experts")
    moe_inter = _int(cfg, "moe_intermediate_size", default=0, field="moe_intermediate_size")
    inter = _int(
        cfg, "intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size", default=0, field="intermediate_size"
    )
    n_shared = _int(cfg, "n_shared_experts", default=0, field="num_shared_experts")
    shared_inter = _int(cfg, "shared_expert_intermediate_size", default=0, field="shared_intermediate_size")
    if fam.qwen3_next and shared_inter and not n_shared:
        n_shared = 1  # Qwen3-Next: one gated shared expert of shared_expert_intermediate_size beside the routed ones
    first_dense = _int(cfg, "first_k_dense_replace", default=0, field="first_dense_layers")
    if (fam.gpt2_style or fam.falcon) and not inter:
        inter = 4 * h
    if fam.llama4:
        # Llama 4: every ``interleave_moe_layer_step``-th layer is MoE (routed experts of intermediate_size
        # plus one shared expert); the others are dense of intermediate_size_mlp (Meta, Llama 4 model card).
        step = _int(cfg, "interleave_moe_layer_step", default=1, field="num_layers") or 1
        moe_inter, n_shared = inter, 1
        first_dense = layers - layers // step
        inter = _int(cfg, "intermediate_size_mlp", default=inter, field="intermediate_size")
    if fam.jamba and n_experts:
        # Jamba: layer i is MoE when i % expert_layer_period == expert_layer_offset (arXiv 2403.19887)
        period = _int(cfg, "expert_layer_period", default=2, field="num_layers") or 1
        offset = _int(cfg, "expert_layer_offset", default=1, field="num_layers")
        first_dense = layers - sum(1 for i in range(layers) if i % period == offset)
    if n_experts and not moe_inter:
        moe_inter = inter
    return _Mlp(inter, n_experts, moe_inter, n_shared, shared_inter, first_dense)


def _state_layers(
    cfg: dict[str, Any], fam: _Family, label: str, h: int, layers: int, lt: list[str] | None
) -> _StateLayers:
    """Jamba's Mamba layers (all but every ``attn_layer_period``-th from ``attn_layer_offset``) or Qwen3-Next's
    Gated DeltaNet layers; none for a plain transformer."""
    if fam.qwen3_next:
        n, params, inner, conv, state = _gated_deltanet(cfg, h, layers, lt)
        return _StateLayers(n, params, inner, conv, state)
    if not fam.jamba:
        return _StateLayers()
    period = _int(cfg, "attn_layer_period", default=8, field="num_layers") or 1
    offset = _int(cfg, "attn_layer_offset", default=4, field="num_layers")
    n = layers - sum(1 for i in range(layers) if i % period == offset)
    if n >= layers:
        raise _unsupported(
            label,
            f"attn_layer_offset {offset} never matches a layer of period {period}: with no attention layer "
            "it is a pure state-space model",
        )
    params = _ssm_mixer_params(cfg, h)
    inner, state, conv = _ssm_sizes(cfg, h)
    return _StateLayers(n, params, inner, conv, state)


def _chunked_local_layers(cfg: dict[str, Any], layers: int) -> int:
    """Llama 4's iRoPE: the RoPE layers attend within chunks of attention_chunk_size tokens, every
    no_rope_layer_interval-th layer (NoPE) attends globally (transformers Llama4TextConfig: no_rope_layers[i] =
    (i + 1) % interval != 0). A chunked layer holds at most one chunk of keys, like a window of that size (vLLM
    allocates it as one: ChunkedLocalAttention)."""
    rope = cfg.get("no_rope_layers")
    if isinstance(rope, list) and rope and all(isinstance(x, int) and not isinstance(x, bool) for x in rope):
        return sum(1 for x in rope[:layers] if x)
    interval = _int(cfg, "no_rope_layer_interval", default=4, field="num_layers") or 1
    return layers - layers // interval


def _sliding(
    cfg: dict[str, Any], fam: _Family, layers: int, max_ctx: int, lt: list[str] | None, ssm_layers: int
) -> tuple[int, int]:
    """(the window, the layers that attend within it): Llama 4's chunks, ``layer_types``, Gemma 3's pattern, or a
    window on every layer; no window when no layer has one, and never more layers than attend."""
    sliding_window = _int(cfg, "sliding_window", default=0, field="sliding_window") or 0
    chunk = _int(cfg, "attention_chunk_size", default=0, field="sliding_window") if fam.llama4 else 0
    local = 0
    if chunk:
        sliding_window = chunk
        local = _chunked_local_layers(cfg, layers)
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
    return sliding_window, min(sliding_layers, layers - ssm_layers)


def from_hf_config(cfg: dict[str, Any], slug: str | None = None, name: str | None = None) -> ModelArch:
    """Build a :class:`ModelArch` from a Hugging Face ``config.json`` dictionary.

    Understands Llama/Mistral/Mixtral/Qwen2/Qwen3(-MoE)/DeepSeek-V3/gpt-oss, GPT-2-style keys
    (``n_embd``, ``n_layer``, ``n_head``), Falcon (multi-query and grouped attention, parallel block),
    Jamba (attention + Mamba layers, MoE every other layer), and multimodal configs whose language
    model sits in ``text_config`` (Gemma 3, Llama 4; sized as the text model, the vision encoder
    is not counted). Raises ``ValueError`` naming the missing or wrong-typed key, and
    :class:`UnsupportedArchitecture` for encoder-only, encoder-decoder and recurrent models.
    """
    label, top_type = _refuse(cfg)
    cfg = _text_config(cfg)
    fam = _family(cfg, top_type, label)
    lt = cfg.get("layer_types")
    h, layers, heads, vocab = _required(cfg, label)
    kv = _kv_heads(cfg, fam, heads)
    head_dim = _int(cfg, "head_dim", default=h // heads, field="head_dim")
    if not head_dim:
        raise ValueError(f"config.json: hidden_size {h} is smaller than num_attention_heads {heads}; give head_dim")
    mlp = _mlp(cfg, fam, h, layers)
    ssm = _state_layers(cfg, fam, label, h, layers, lt)
    max_ctx = _int(
        cfg,
        "max_position_embeddings",
        "n_positions",
        "n_ctx",
        default=4096 if not fam.falcon else 2048,
        field="max_context",
    )
    assert max_ctx is not None
    sliding_window, sliding_layers = _sliding(cfg, fam, layers, max_ctx, lt, ssm.layers)
    return _model_arch(
        cfg, fam, slug, name, h, layers, heads, kv, head_dim, vocab, max_ctx, mlp, ssm, sliding_window, sliding_layers
    )


def _model_arch(
    cfg: dict[str, Any],
    fam: _Family,
    slug: str | None,
    name: str | None,
    h: int,
    layers: int,
    heads: int,
    kv: int,
    head_dim: int,
    vocab: int,
    max_ctx: int,
    mlp: _Mlp,
    ssm: _StateLayers,
    sliding_window: int,
    sliding_layers: int,
) -> ModelArch:
    """The record, with the flags each family sets (biases, norms, tied embeddings, q/k norms, sinks) and the MLA
    ranks read as they are."""
    mtype, arch, gpt2_style, falcon, is_gpt_oss = fam.mtype, fam.arch, fam.gpt2_style, fam.falcon, fam.gpt_oss
    bias = _bool(cfg, "bias", False) if falcon else False
    raw_name = _str(cfg, "_name_or_path")
    return ModelArch(
        slug=clean_name(slug or (raw_name or mtype or "custom").split("/")[-1].lower()),
        name=clean_name(name or raw_name or arch or mtype or "custom model"),
        hidden_size=h,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=head_dim,
        intermediate_size=mlp.inter,
        vocab_size=vocab,
        tie_embeddings=_bool(cfg, "tie_word_embeddings", gpt2_style or falcon or fam.gemma),
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
        num_experts=mlp.n_experts,
        experts_per_tok=_int(cfg, "num_experts_per_tok", "experts_per_token", default=0, field="experts_per_tok"),
        moe_intermediate_size=mlp.moe_inter,
        num_shared_experts=mlp.n_shared,
        shared_intermediate_size=mlp.shared_inter,
        first_dense_layers=mlp.first_dense,
        router_bias=is_gpt_oss,
        q_lora_rank=_int(cfg, "q_lora_rank", default=0),
        kv_lora_rank=_int(cfg, "kv_lora_rank", default=0),
        qk_nope_head_dim=_int(cfg, "qk_nope_head_dim", default=0),
        qk_rope_head_dim=_int(cfg, "qk_rope_head_dim", default=0),
        v_head_dim=_int(cfg, "v_head_dim", default=0),
        sliding_window=sliding_window,
        sliding_layers=sliding_layers,
        ssm_layers=ssm.layers,
        ssm_mixer_params=ssm.params,
        ssm_d_inner=ssm.inner,
        ssm_d_conv=ssm.conv,
        ssm_d_state=ssm.state,
    )
