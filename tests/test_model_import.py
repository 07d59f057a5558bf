"""Model import: the families users bring are sized within 5% of the published parameter count, the rest are
refused with the architecture named, and wrong-typed fields are refused by name.

The configs are the size-bearing keys of each model's published config.json on the Hugging Face Hub
(tiiuae/falcon-7b, tiiuae/falcon-180B, ai21labs/Jamba-v0.1, google/gemma-3-27b-it,
meta-llama/Llama-4-Scout-17B-16E, google-bert/bert-base-uncased, state-spaces/mamba-2.8b-hf,
RWKV/rwkv-4-169m-pile, google-t5/t5-base).
"""

import dataclasses

import pytest

from core.catalog import UnsupportedArchitecture, from_hf_config
from core.config import resolve

FALCON_7B = {
    "architectures": ["FalconForCausalLM"],
    "model_type": "falcon",
    "hidden_size": 4544,
    "num_attention_heads": 71,
    "num_hidden_layers": 32,
    "vocab_size": 65024,
    "multi_query": True,
    "parallel_attn": True,
    "new_decoder_architecture": False,
    "bias": False,
    "alibi": False,
    "_name_or_path": "tiiuae/falcon-7b",
}
FALCON_180B = {
    "architectures": ["FalconForCausalLM"],
    "model_type": "falcon",
    "hidden_size": 14848,
    "num_attention_heads": 232,
    "num_kv_heads": 8,
    "num_hidden_layers": 80,
    "vocab_size": 65024,
    "multi_query": True,
    "parallel_attn": True,
    "new_decoder_architecture": True,
    "bias": False,
    "alibi": False,
}
JAMBA = {
    "architectures": ["JambaForCausalLM"],
    "model_type": "jamba",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 65536,
    "num_experts": 16,
    "num_experts_per_tok": 2,
    "expert_layer_period": 2,
    "expert_layer_offset": 1,
    "attn_layer_period": 8,
    "attn_layer_offset": 4,
    "mamba_d_state": 16,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
    "mamba_dt_rank": 256,
    "mamba_conv_bias": True,
    "mamba_proj_bias": False,
    "tie_word_embeddings": False,
    "max_position_embeddings": 262144,
}
GEMMA3_27B = {
    "architectures": ["Gemma3ForConditionalGeneration"],
    "model_type": "gemma3",
    "text_config": {
        "model_type": "gemma3_text",
        "hidden_size": 5376,
        "intermediate_size": 21504,
        "num_hidden_layers": 62,
        "num_attention_heads": 32,
        "num_key_value_heads": 16,
        "head_dim": 128,
        "vocab_size": 262208,
        "sliding_window": 1024,
        "sliding_window_pattern": 6,
        "max_position_embeddings": 131072,
    },
    "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152, "num_hidden_layers": 27},
}
LLAMA4_SCOUT = {
    "architectures": ["Llama4ForConditionalGeneration"],
    "model_type": "llama4",
    "text_config": {
        "model_type": "llama4_text",
        "hidden_size": 5120,
        "intermediate_size": 8192,
        "intermediate_size_mlp": 16384,
        "num_hidden_layers": 48,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 202048,
        "num_local_experts": 16,
        "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 1,
        "tie_word_embeddings": False,
        "max_position_embeddings": 10485760,
    },
    "vision_config": {"model_type": "llama4_vision_model", "hidden_size": 1408},
}


@pytest.mark.parametrize(
    "cfg, published, why",
    [
        # Falcon-7B: "7B parameters" (TII model card); the Hub's safetensors count is 6.92B.
        (FALCON_7B, 6.92e9, "multi-query attention (one KV head) and a GELU MLP of 4h"),
        # Falcon-180B: "180B parameters" (TII model card; Almazrouei et al., arXiv 2311.16867, Table 1: 179.5B).
        (FALCON_180B, 179.5e9, "grouped KV heads (num_kv_heads=8) in the new decoder architecture"),
        # Jamba v0.1: "52B total parameters, 12B active" (AI21 model card; Lieber et al., arXiv 2403.19887).
        (JAMBA, 52e9, "1 attention : 7 Mamba layers, MoE (16 experts) every other layer"),
        # Gemma 3 27B: "27B" (Gemma 3 technical report, arXiv 2503.19786, Table 1: 25.6B non-embedding + 1.4B
        # embedding; the 0.4B vision encoder is not counted here).
        (GEMMA3_27B, 27.0e9, "the language model nested in text_config"),
        # Llama 4 Scout: "109B total parameters, 17B active" (Meta Llama 4 model card).
        (LLAMA4_SCOUT, 109e9, "16 routed experts + 1 shared per layer, nested in text_config"),
    ],
)
def test_families_are_sized_within_5pct_of_the_published_count(cfg, published, why):
    m = from_hf_config(cfg)
    assert abs(m.total_params() / published - 1) < 0.05, (why, m.total_params())


def test_falcon_7b_kv_cache_is_multi_query():
    m = from_hf_config(FALCON_7B)
    # one KV head of 64: 2 x 1 x 64 elements per token per layer (not 71 heads' worth)
    assert m.num_kv_heads == 1 and m.kv_elements_per_token_layer() == 2 * 64


def test_jamba_holds_kv_only_in_its_attention_layers():
    m = from_hf_config(JAMBA)
    # layer i has attention when i % attn_layer_period (8) == attn_layer_offset (4): layers 4, 12, 20, 28
    assert m.ssm_layers == 28 and m.attention_layers == m.full_attention_layers == 4
    # the KV bytes count the attention layers, so the context each holds is the whole context
    assert m.kv_context_tokens(8000) == 8000
    # active: 12B published (2 of 16 experts)
    assert abs(m.active_params() / 12e9 - 1) < 0.05


# --- Jamba outside the parameter count: KV, state, attention FLOPs --------------------------------------
# Hand derivation from Jamba-v0.1's config.json (JAMBA above): h = 4,096, 32 layers of which 4 attend
# (attn_layer_period 8, offset 4), 8 KV heads of d_h = 4,096 / 32 = 128; Mamba d_inner = mamba_expand x h = 8,192,
# d_conv = 4, d_state = 16, dt_rank = 256.
JAMBA_KV_BYTES_PER_TOKEN = 2 * 4 * 8 * 128 * 2  # K and V x 4 attention layers x 8 heads x 128 x BF16 = 16,384
JAMBA_STATE_BYTES_PER_SEQ = 28 * 8192 * (4 + 16) * 2  # 28 Mamba layers x d_inner x (d_conv + d_state) x BF16
# one Mamba mixer (HF JambaMambaMixer): in_proj h x 2E, conv1d E x 4 + E bias, x_proj E x (R + 2N),
# dt_proj R x E + E, A_log E x N, D E, out_proj E x h, dt/B/C norms R + 2N
JAMBA_MIXER_PARAMS = (
    4096 * 2 * 8192 + 8192 * 4 + 8192 + 8192 * (256 + 32) + 256 * 8192 + 8192 + 8192 * 16 + 8192 + 8192 * 4096 + 288
)


def _jamba_cfg(**kw):
    from core.config import DEFAULT

    base = dict(
        custom_model=from_hf_config(JAMBA),
        gpu="h200-sxm",
        gpus_per_node=1,
        tp=1,
        pp=1,
        ep=1,
        weights="bf16",
        kv_dtype="bf16",
    )
    return DEFAULT.with_(**{**base, **kw})


def test_jamba_kv_bytes_per_token_count_only_the_attention_layers():
    from core.physics import kv_bytes_per_token

    assert JAMBA_KV_BYTES_PER_TOKEN == 16_384
    assert kv_bytes_per_token(from_hf_config(JAMBA), 2.0) == JAMBA_KV_BYTES_PER_TOKEN


def test_jamba_holds_its_mamba_state_per_sequence():
    from core.physics import serving_memory

    m = from_hf_config(JAMBA)
    assert JAMBA_STATE_BYTES_PER_SEQ == 9_175_040
    assert m.ssm_state_bytes_per_seq(2.0) == JAMBA_STATE_BYTES_PER_SEQ
    # one sequence of 8,192 tokens (whole blocks of 16, no shared prefix): KV grows with the context, the state not
    r = serving_memory(_jamba_cfg(input_tokens=8000, output_tokens=192, batch=1, prefix_cache_frac=0.0))
    assert r.kv_bytes_per_token == JAMBA_KV_BYTES_PER_TOKEN
    assert r.ssm_state_bytes_per_seq_per_gpu == JAMBA_STATE_BYTES_PER_SEQ
    assert r.kv_bytes_per_seq_per_gpu == 16_384 * 8192 + 9_175_040  # 143,392,768 B
    # TP 2 splits both (KV heads 8 -> 4 per GPU; d_inner 8,192 -> 4,096)
    r2 = serving_memory(
        _jamba_cfg(input_tokens=8000, output_tokens=192, batch=1, prefix_cache_frac=0.0, gpus_per_node=2, tp=2)
    )
    assert r2.kv_bytes_per_seq_per_gpu == (16_384 * 8192 + 9_175_040) / 2


def test_jamba_attention_flops_count_only_the_attention_layers():
    from core.physics import StepModel
    from core.training import attention_pairs_per_token

    m = from_hf_config(JAMBA)
    sm = StepModel.from_deployment(resolve(_jamba_cfg()))
    # 4 FLOP per (query, key) pair per layer per H x d_h: 4 x 4 layers x 32 x 128 = 65,536 (not 32 layers' 524,288)
    assert sm.attn_flop_per_pair == 4 * 4 * 32 * 128
    # the cached tokens a decode step reads at context c: all of c in each attention layer, k_t per token
    assert sm.kv_read_tokens(8000) == 8000
    assert sm.kv_bytes_per_token == JAMBA_KV_BYTES_PER_TOKEN
    # training: pairs per token summed over the 4 attention layers, (s + 1) / 2 each
    assert attention_pairs_per_token(m, 4096) == 4 * 4097 / 2


def test_jamba_decode_step_reads_and_rewrites_each_sequences_mamba_state():
    from core.physics import StepModel

    cfg = _jamba_cfg(gpus_per_node=2, tp=2)
    dep = resolve(cfg)
    sm = StepModel.from_deployment(dep)
    # TP 2 splits d_inner: one rank holds 9,175,040 / 2 = 4,587,520 B of each sequence's state
    assert sm.state_bytes_per_seq == JAMBA_STATE_BYTES_PER_SEQ / 2
    # a decode step of S sequences reads and rewrites it: S x 2 x 4,587,520 B at BW x mbu
    bw = dep.gpu.memory_bw_bytes_per_s * cfg.assumptions.mbu
    without = dataclasses.replace(sm, state_bytes_per_seq=0.0)
    for S in (1, 64):
        extra = sm.iteration_s(float(S), S * 4000.0, S * 4000.0) - without.iteration_s(float(S), S * 4000.0, S * 4000.0)
        assert extra == pytest.approx(S * 2 * 4_587_520 / bw, rel=1e-9)
    # a model without state-space layers carries no such term
    from core.config import DEFAULT

    assert StepModel.from_deployment(resolve(DEFAULT)).state_bytes_per_seq == 0.0


def test_jamba_mamba_mixer_flops_are_in_the_active_matmul_params():
    from core.physics import StepModel

    m = from_hf_config(JAMBA)
    assert m.ssm_mixer_params == JAMBA_MIXER_PARAMS == 105_308_448
    plain = m.model_copy(update={"ssm_layers": 0, "ssm_mixer_params": 0, "ssm_d_inner": 0})
    # each Mamba layer carries its mixer instead of attention; 2 FLOP per active parameter per token. (The
    # selective scan's own ~9 x d_inner x d_state = 1.2 MFLOP per token per layer, 0.6% of the mixer's 211 MFLOP,
    # is not counted.)
    assert m.active_matmul_params() - plain.active_matmul_params() == 28 * (JAMBA_MIXER_PARAMS - m.attention_params())
    assert StepModel.from_deployment(resolve(_jamba_cfg())).flop_per_token == 2.0 * m.active_matmul_params()


def test_jamba_kv_pool_sets_the_state_aside_and_counts_attention_layers_only():
    from core.physics import serving_memory
    from core.serving import SimSpec, kv_pool, workspace_tokens

    cfg = _jamba_cfg()
    spec = SimSpec(num_requests=100, rate_per_s=1.0, max_batch=64)
    pool = kv_pool(cfg, spec)
    assert pool.full_share == 1.0 and pool.slide_share == 0.0
    mem = serving_memory(cfg.with_(batch=1, input_tokens=workspace_tokens(spec), output_tokens=1))
    expect = (mem.kv_budget_bytes_per_gpu - 64 * JAMBA_STATE_BYTES_PER_SEQ) // (JAMBA_KV_BYTES_PER_TOKEN * 16)
    assert pool.blocks == expect


def test_jamba_without_an_attention_layer_is_refused():
    with pytest.raises(UnsupportedArchitecture, match=r"unsupported architecture: JambaForCausalLM \(.*no attention"):
        from_hf_config({**JAMBA, "attn_layer_period": 8, "attn_layer_offset": 9})


def test_jamba_dt_rank_auto_is_the_hf_default():
    assert from_hf_config({**JAMBA, "mamba_dt_rank": "auto"}).ssm_mixer_params == JAMBA_MIXER_PARAMS


def test_llama4_scout_active_params():
    assert abs(from_hf_config(LLAMA4_SCOUT).active_params() / 17e9 - 1) < 0.05


@pytest.mark.parametrize(
    "cfg, arch",
    [
        (
            {
                "architectures": ["BertForMaskedLM"],
                "model_type": "bert",
                "hidden_size": 768,
                "num_hidden_layers": 12,
                "num_attention_heads": 12,
                "vocab_size": 30522,
                "intermediate_size": 3072,
            },
            "BertForMaskedLM",
        ),
        (
            {
                "architectures": ["MambaForCausalLM"],
                "model_type": "mamba",
                "hidden_size": 2560,
                "num_hidden_layers": 64,
                "vocab_size": 50280,
                "state_size": 16,
            },
            "MambaForCausalLM",
        ),
        (
            {
                "architectures": ["RwkvForCausalLM"],
                "model_type": "rwkv",
                "hidden_size": 768,
                "num_hidden_layers": 12,
                "vocab_size": 50277,
            },
            "RwkvForCausalLM",
        ),
        (
            {
                "architectures": ["T5ForConditionalGeneration"],
                "model_type": "t5",
                "d_model": 768,
                "num_layers": 12,
                "num_heads": 12,
                "vocab_size": 32128,
                "is_encoder_decoder": True,
            },
            "T5ForConditionalGeneration",
        ),
    ],
)
def test_unsupported_families_are_refused_with_the_architecture_named(cfg, arch):
    with pytest.raises(UnsupportedArchitecture, match=rf"unsupported architecture: {arch} \(.+\)"):
        from_hf_config(cfg)


BASE = {
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "vocab_size": 32000,
    "intermediate_size": 11008,
}


@pytest.mark.parametrize(
    "change, words",
    [
        ({"hidden_size": True}, "hidden_size' must be an integer, not bool"),
        ({"hidden_size": "4096"}, "hidden_size' must be an integer, not str"),
        ({"hidden_size": [4096]}, "hidden_size' must be an integer, not list"),
        ({"num_hidden_layers": {"a": 1}}, "num_hidden_layers' must be an integer, not dict"),
        ({"architectures": 5}, "architectures' must be a list"),
        ({"layer_types": 5}, "layer_types' must be a list"),
        ({"num_attention_heads": 0}, "num_attention_heads'.*below the minimum"),
        ({"num_attention_heads": 10_000_000_000}, "num_attention_heads'.*above the maximum"),
        ({"hidden_size": float("inf")}, "hidden_size' must be an integer"),
        ({"vocab_size": 10**5000}, "vocab_size'.*above the maximum"),
        ({"tie_word_embeddings": "yes"}, "tie_word_embeddings' must be true or false"),
        ({"model_type": 7}, "model_type' must be a string"),
    ],
)
def test_wrong_typed_fields_are_refused_by_name(change, words):
    with pytest.raises(ValueError, match=words):
        from_hf_config({**BASE, **change})


def test_a_name_from_a_config_cannot_carry_markup():
    m = from_hf_config({**BASE, "_name_or_path": "![x](http://evil.example/p.png) [click](http://x)"})
    for ch in "![]:<>":
        assert ch not in m.name
