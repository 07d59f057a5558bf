"""Catalog validation: every file loads, every row is sourced and dated, model counts match
published figures, dense peaks stay below sparse ones, and bad rows fail loudly and precisely."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from core import catalog
from core.base import GiB
from core.catalog import (
    CatalogError,
    from_hf_config,
    load_fabrics,
    load_gpus,
    load_model_file,
    load_models,
    load_prices,
)

GPU_SLUGS = set(
    "h100-sxm h100-pcie h100-nvl h200-sxm b200 b300 gb200 a100-40gb a100-80gb l40s l4 mi300x mi325x mi355x gaudi3 "
    "h100-gt-96gb rtx-4090".split()
)
FABRIC_SLUGS = {"ib-ndr", "ib-xdr", "roce-400g", "eth-100g", "eth-200g"}
MODEL_SLUGS = {
    "llama-2-7b",
    "llama-2-70b",
    "codellama-34b",
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-3.1-405b",
    "mistral-7b",
    "mixtral-8x7b",
    "mixtral-8x22b",
    "qwen2.5-72b",
    "qwen3-8b",
    "qwen3-32b",
    "qwen3-235b-a22b",
    "deepseek-v3",
    "gpt-oss-120b",
    "gpt-3-175b",
    "gpt-j-6b",
    "qwen2.5-7b-instruct-1m",
    "llama-4-scout-17b-16e",
    "qwen3-next-80b-a3b",
    "gemma-3-12b-it",
    "deepseek-coder-v2",
}

# Where each model's published figure comes from (the number itself lives in the model file's
# ``_rabit`` block; this table documents its origin and what the architecture gives).
#   llama-2-7b       6,738,415,616 total: HF num_parameters() / GGUF general.parameter_count (paper label "7B").
#                    Architecture: exactly 6,738,415,616.
#   llama-2-70b      68,976,648,192 total: HF num_parameters() (paper label "70B"). Architecture: exact.
#   llama-3.1-8b     8,030,261,248 total: HF num_parameters(). Architecture: exact (hand-derived below).
#   llama-3.1-70b    70,553,706,496 total: HF num_parameters(). Architecture: exact.
#   llama-3.1-405b   "405B" (Llama 3 paper, Table 3). Architecture: 405.85B (+0.2%).
#   mistral-7b       7,241,732,096 total: HF num_parameters() / GGUF (paper "7.3B"). Architecture: exact.
#   mixtral-8x7b     46.7B total / 12.9B active (Mistral AI announcement). Architecture: 46.70B / 12.88B.
#   mixtral-8x22b    141B total / 39B active (Mistral AI announcement). Architecture: 140.62B / 39.15B.
#   qwen2.5-72b      72.7B total (model card; 70.0B non-embedding). Architecture: 72.71B.
#   qwen3-8b         8.2B total (model card; 6.95B non-embedding). Architecture: 8.19B.
#   qwen3-32b        32.8B total (model card; 31.2B non-embedding). Architecture: 32.76B.
#   qwen3-235b-a22b  235B total / 22B active (model card). Architecture: 235.09B / 22.19B (+0.9%).
#   deepseek-v3      671B total (README, main model without the 14B MTP module) / 36.6B active
#                    (README_WEIGHTS.md: "36.6B (including 0.9B for the output Head)", i.e. WITHOUT the
#                    input embedding; the headline "37B" is that figure rounded). Architecture: 671.03B /
#                    37.55B with the input embedding, 36.63B without.
#   gpt-oss-120b     116.83B total / 5.13B active (model card Table 1; active counts the unembedding but
#                    not the embedding: 20b's 3.61B checks the same convention). Architecture: 116.83B /
#                    5.13B without the input embedding.
#   gpt-3-175b       "175.0B" (Brown et al. 2020, Table 2.1). Architecture: 174.60B (-0.2%).
#   gpt-j-6b         6,053,381,344 total (EleutherAI model card). Architecture, read as a GPT-2 block: 6.060B
#                    (+0.1%: the learned position table and q/k/v biases GPT-J does not have).
#   qwen2.5-7b-instruct-1m  7.61B (model card). Architecture: 7.616B (+0.07%).
#   llama-4-scout-17b-16e   108B for the language model (the hub's GGUF listing; Meta: ~109B with the vision
#                    encoder), "17B active" (a rounded label). Architecture (text model): 107.77B (-0.2%) / 17.17B.
#   qwen3-next-80b-a3b      80B total, "3B activated" (model card, a rounded label). Architecture: 79.57B (-0.5%:
#                    the attention output gates and the shared-expert gate are not counted) / 3.46B.
#   deepseek-coder-v2       236B total / "21B active" (README; a rounded label). Architecture: 235.74B (-0.1%) /
#                    20.85B without the input embedding.
#   gemma-3-12b-it   11,771M = 1,012M embedding + 10,759M non-embedding (Gemma 3 report Table 1, vision encoder
#                    apart). Architecture: 11.766B (-0.05%).
#
# ``active_excludes_embedding`` therefore means "the input-embedding lookup is not counted; the LM head
# is" (ModelArch.active_matmul_params for untied models). Subtracting the LM head as well
# would give 4.55B for gpt-oss-120b and 35.7B for DeepSeek-V3, matching no published figure, so the
# published convention (and the architecture) wins over that reading.
TOLERANCE = 0.01


@pytest.fixture(scope="module")
def models():
    return load_models()


@pytest.fixture(scope="module")
def gpus():
    return load_gpus()


# --- every catalog loads ------------------------------------------------------------------------


def test_every_catalog_loads_with_the_expected_rows(gpus, models):
    assert set(gpus) == GPU_SLUGS
    assert set(load_fabrics()) == FABRIC_SLUGS
    assert set(models) == MODEL_SLUGS
    prices = load_prices()
    assert prices and {p.gpu for p in prices} <= GPU_SLUGS


def test_memoised_accessors_agree_with_the_loaders(gpus):
    assert catalog.gpu("h100-sxm") == gpus["h100-sxm"]
    assert catalog.fabric("ib-ndr").bw_gb_per_s == 50
    assert catalog.model("llama-3.1-8b").num_layers == 32
    with pytest.raises(KeyError, match="unknown GPU"):
        catalog.gpu("h100-typo")


def _all_rows():
    yield from (("gpus.toml", s, r) for s, r in load_gpus().items())
    yield from (("fabrics.toml", s, r) for s, r in load_fabrics().items())
    yield from (("prices.csv", f"{i} ({p.gpu})", p) for i, p in enumerate(load_prices(), 1))
    yield from ((f"models/{s}.json", s, e.meta) for s, e in load_models().items())


def test_every_row_has_a_source_an_as_of_date_and_a_verification_tag():
    today = dt.date.today()
    for where, label, row in _all_rows():
        assert row.source.strip() and len(row.source) >= 3, (where, label)
        assert isinstance(row.as_of, dt.date) and dt.date(2020, 1, 1) <= row.as_of <= today, (where, label)
        assert row.verification in ("V", "S", "U"), (where, label)


# --- hardware -----------------------------------------------------------------------------------


def test_dense_peaks_are_below_sparse_peaks(gpus):
    for slug, g in gpus.items():
        if g.bf16_tflops_sparse is not None:
            assert g.bf16_tflops < g.bf16_tflops_sparse, slug


def test_known_dense_peaks_and_units():
    # Dense, not the datasheet's 2:4-sparse headline (H100 SXM "1,979 BF16" is sparse).
    h100 = catalog.gpu("h100-sxm")
    assert h100.bf16_tflops == 989 and h100.fp8_tflops == 1979
    assert h100.peak_flop_per_s("bf16") == pytest.approx(989e12)
    assert h100.memory_bytes == 80 * GiB == pytest.approx(85.899e9, rel=1e-4)  # "80 GB" HBM is binary
    assert h100.scale_up_bw_bytes_per_s == pytest.approx(450e9)  # 900 GB/s bidirectional -> 450 each way
    b200 = catalog.gpu("b200")
    assert (b200.bf16_tflops, b200.fp8_tflops, b200.fp4_tflops) == (2250, 4500, 9000)
    assert catalog.gpu("a100-80gb").int4_tops == 1248
    # A100 has no FP8: an FP8 request falls back to BF16.
    assert not catalog.gpu("a100-40gb").supports("fp8")
    assert catalog.gpu("a100-40gb").peak_flop_per_s("fp8") == pytest.approx(312e12)


def test_fp4_only_on_parts_that_have_it(gpus):
    with_fp4 = {s for s, g in gpus.items() if g.fp4_tflops}
    assert with_fp4 == {"b200", "b300", "gb200", "mi355x"}


def test_peaks_rise_with_narrower_formats(gpus):
    for slug, g in gpus.items():
        if g.fp8_tflops:
            assert g.fp8_tflops >= g.bf16_tflops, slug
        if g.fp4_tflops:
            assert g.fp4_tflops >= g.fp8_tflops, slug


def test_topologies_are_self_consistent(gpus):
    for slug, g in gpus.items():
        if g.topology == "mesh":
            # a full mesh of nvlink_domain GPUs: one link (group) to each peer, per-GPU total = sum of links
            assert g.mesh_links == g.nvlink_domain - 1 == 7, slug
            assert g.mesh_links * g.link_bw_gb_per_s == pytest.approx(g.scale_up_bw_gb_per_s), slug
        else:
            assert g.mesh_links == 0 and g.link_bw_gb_per_s == 0, slug
        if g.topology == "nvswitch":
            assert g.scale_up_bw_gb_per_s >= 300, slug
        if g.topology == "pcie":
            assert g.scale_up_bw_gb_per_s <= 64, slug
        assert g.nvlink_domain >= g.gpus_per_node, slug
    assert gpus["gb200"].nvlink_domain == 72 and gpus["gb200"].gpus_per_node == 4
    # MI300X: AMD's "128 GB/s per link" is bidirectional -> 64 GB/s per direction, 7 links = 448.
    assert gpus["mi300x"].link_bw_gb_per_s == 64 and gpus["mi300x"].scale_up_bw_gb_per_s == 448


def test_fabrics_are_per_direction_line_rates():
    f = load_fabrics()
    assert f["ib-ndr"].bw_gb_per_s == 400 / 8
    assert f["ib-xdr"].bw_gb_per_s == 800 / 8
    assert f["eth-100g"].bw_gb_per_s == 100 / 8
    assert f["eth-100g"].latency_s > f["ib-ndr"].latency_s


# --- models -------------------------------------------------------------------------------------


def _compared_active(entry) -> int:
    arch = entry.arch
    if entry.meta.active_excludes_embedding:
        return arch.active_params() - arch.embedding_params()  # LM head still counted (see table above)
    return arch.active_params()


@pytest.mark.parametrize("slug", sorted(MODEL_SLUGS))
def test_total_params_match_the_published_figure(models, slug):
    e = models[slug]
    got, want = e.arch.total_params(), e.meta.published_total_params
    assert abs(got / want - 1) <= TOLERANCE, f"{slug}: computed {got:,} vs published {want:,.0f}"


@pytest.mark.parametrize("slug", sorted(MODEL_SLUGS))
def test_active_params_match_the_published_figure(models, slug):
    e = models[slug]
    want = e.meta.published_active_params
    if want is None:  # dense: every parameter is touched by every token
        assert not e.arch.is_moe and e.arch.active_params() == e.arch.total_params()
        return
    got = _compared_active(e)
    if e.meta.published_active_rounding:  # a rounded label ("17B active"): the count must round to it
        assert abs(got - want) <= e.meta.published_active_rounding / 2, f"{slug}: computed {got:,} vs label {want:,.0f}"
        return
    assert abs(got / want - 1) <= TOLERANCE, f"{slug}: computed {got:,} vs published {want:,.0f}"


def test_llama_3_1_8b_hand_derived_count(models):
    """Independent hand derivation (h=4096, L=32, H=32, KV=8, d=128, I=14336, V=128256, untied):

    embedding  V*h            = 128256*4096                  =   525,336,576
    LM head    V*h            (untied)                       =   525,336,576
    attention  h*(H*d) + 2*h*(KV*d) + (H*d)*h
               = 4096*4096 + 2*4096*1024 + 4096*4096          =    41,943,040 per layer
    MLP        3*h*I = 3*4096*14336                          =   176,160,768 per layer
    norms      2*h                                           =         8,192 per layer
    per layer                                                =   218,112,000
    32 layers                                                = 6,979,584,000
    final norm h                                             =         4,096
    total      525,336,576*2 + 6,979,584,000 + 4,096          = 8,030,261,248
    """
    a = models["llama-3.1-8b"].arch
    assert a.attention_params() == 41_943_040
    assert a.layer_params(moe=False) == 218_112_000
    assert a.total_params() == 8_030_261_248
    # KV cache: 2 (K and V) x 8 KV heads x 128 = 2,048 elements per token per layer;
    # x 32 layers = 65,536 elements = 131,072 bytes per token in BF16 (catalog-facts.md B).
    assert a.kv_elements_per_token_layer() == 2 * 8 * 128 == 2048
    assert a.kv_elements_per_token_layer() * a.num_layers * 2 == 131_072
    assert a.max_context == 131072


def test_other_hand_checks(models):
    # Llama-2-7B is MHA: 2 x 32 x 128 = 8,192 elements per token per layer (524,288 B/token over 32 layers).
    assert models["llama-2-7b"].arch.kv_elements_per_token_layer() * 32 * 2 == 524_288
    # DeepSeek-V3 MLA caches the latent: kv_lora_rank 512 + rope 64 = 576 per layer;
    # x 61 layers x 2 B = 70,272 B/token.
    ds = models["deepseek-v3"].arch
    assert ds.is_mla and ds.kv_elements_per_token_layer() == 576
    assert ds.kv_elements_per_token_layer() * ds.num_layers * 2 == 70_272
    assert (ds.dense_layers, ds.moe_layers) == (3, 58)
    # gpt-oss-120b: 18 sliding-window (128-token) layers and 18 full-attention layers.
    oss = models["gpt-oss-120b"].arch
    assert (oss.sliding_layers, oss.sliding_window) == (18, 128)
    assert oss.attention_sinks and oss.router_bias
    assert oss.kv_context_tokens(8192) == pytest.approx((18 * 8192 + 18 * 128) / 36)
    # Mistral-7B v0.1 slides every layer over 4,096 tokens; Qwen2.5 has the window switched off.
    m7 = models["mistral-7b"].arch
    assert (m7.sliding_layers, m7.sliding_window) == (32, 4096)
    assert models["qwen2.5-72b"].arch.sliding_layers == 0
    # GPT-3: learned 2,048-row position table, tied embeddings, 12*h^2 per layer plus biases.
    g3 = models["gpt-3-175b"].arch
    assert g3.learned_pos_embeddings == 2048 and g3.tie_embeddings and g3.mlp_kind == "gelu"
    assert g3.attention_bias and g3.attn_out_bias and g3.mlp_bias


def test_model_files_are_real_hf_configs():
    for path in sorted((catalog.CATALOG_DIR / "models").glob("*.json")):
        cfg = json.loads(path.read_text())
        assert "_rabit" in cfg and cfg["_rabit"]["slug"] == path.stem
        assert "architectures" in cfg and "model_type" in cfg, path.name


# --- bad files fail with file, row and field --------------------------------------------------

_GOOD_GPU = """
[[gpu]]
slug = "ok-gpu"
name = "OK"
vendor = "nvidia"
memory_gib = 80
memory_bw_tb_per_s = 3.35
bf16_tflops = 989
scale_up = "NVLink"
topology = "nvswitch"
scale_up_bw_gb_per_s = 450
scale_up_latency_us = 2.5
nvlink_domain = 8
gpus_per_node = 8
power_w = 700
source = "test"
as_of = 2026-01-01
"""


def test_a_broken_gpu_row_names_file_row_and_field(tmp_path: Path):
    bad = _GOOD_GPU + _GOOD_GPU.replace('"ok-gpu"', '"bad-gpu"').replace("memory_gib = 80", "memory_gib = -1")
    path = tmp_path / "broken_gpus.toml"
    path.write_text(bad)
    with pytest.raises(CatalogError) as err:
        load_gpus(path)
    msg = str(err.value)
    assert "broken_gpus.toml" in msg and "row 2 (bad-gpu)" in msg and "memory_gib" in msg


def test_a_gpu_row_with_a_wrong_topology_or_unknown_key_is_rejected(tmp_path: Path):
    path = tmp_path / "g.toml"
    path.write_text(_GOOD_GPU.replace('topology = "nvswitch"', 'topology = "torus"'))
    with pytest.raises(CatalogError, match=r"g\.toml: row 1 \(ok-gpu\): field 'topology'"):
        load_gpus(path)
    path.write_text(_GOOD_GPU.replace("power_w = 700", "power_w = 700\nbf16_sparse = 1979"))
    with pytest.raises(CatalogError, match="bf16_sparse"):
        load_gpus(path)


def test_a_broken_price_csv_names_file_row_and_field(tmp_path: Path):
    text = (
        "# comment lines are skipped\n"
        "gpu,provider,kind,usd_per_gpu_hour,region,source,as_of,verification\n"
        "h100-sxm,Good,on-demand,3.99,,src,2026-01-01,S\n"
        "h100-pcie,Bad,lease,2.00,,src,2026-01-01,S\n"
    )
    path = tmp_path / "bad_prices.csv"
    path.write_text(text)
    with pytest.raises(CatalogError) as err:
        load_prices(path)
    msg = str(err.value)
    assert "bad_prices.csv" in msg and "row 2 (h100-pcie)" in msg and "kind" in msg
    path.write_text(text.replace("lease,2.00", "on-demand,-2"))
    with pytest.raises(CatalogError, match=r"row 2 \(h100-pcie\): field 'usd_per_gpu_hour'"):
        load_prices(path)
    path.write_text("gpu,price\nh100-sxm,3\n")
    with pytest.raises(CatalogError, match="header"):
        load_prices(path)


def test_a_model_file_without_provenance_is_rejected(tmp_path: Path):
    path = tmp_path / "m.json"
    path.write_text(
        json.dumps({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100})
    )
    with pytest.raises(CatalogError, match=r"m\.json: row 1: field '_rabit'"):
        load_model_file(path)


def test_from_hf_config_names_a_missing_key():
    cfg = json.loads((catalog.CATALOG_DIR / "models" / "llama-3.1-8b.json").read_text())
    cfg.pop("_rabit")
    del cfg["hidden_size"]
    with pytest.raises(ValueError, match="hidden_size"):
        from_hf_config(cfg)
