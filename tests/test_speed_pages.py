"""The Speed and Show-the-math pages: they follow the sidebar and show exactly what the CLI prints."""

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

from cli.main import main
from core.base import fmt_value

APP = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")


def metrics(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def cli_json(capsys, *argv: str) -> dict:
    capsys.readouterr()
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def open_page(name: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.switch_page(f"../pages/{name}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_math_page_final_numbers_equal_the_cli(clear_cache, capsys):
    at = open_page("math")
    # the textbook example with our chain: memory 9.585 + TP all-reduces 2.392 + fixed costs 1.552 = 13.529 ms
    # (derived in tests/test_speed.py)
    assert metrics(at)["Decode step (mean over the output)"] == "13.5 ms"
    # change the config, then compare every final number with `rabit speed` and `rabit memory`
    at.number_input(key="cfg.batch").set_value(48).run()
    at.number_input(key="cfg.input_tokens").set_value(2048).run()
    at.selectbox(key="cfg.kv_dtype").set_value("fp8").run()
    assert not at.exception
    shown = metrics(at)
    args = (
        "--model",
        "llama-3.1-70b",
        "--gpu",
        "h100-sxm",
        "--gpus",
        "8",
        "--tp",
        "8",
        "--batch",
        "48",
        "--input",
        "2048",
        "--output",
        "4096",
        "--kv-dtype",
        "fp8",
        "--json",
    )
    sp = cli_json(capsys, "speed", *args)
    mem = cli_json(capsys, "memory", *args)
    assert shown["Time to first token (one batch)"] == fmt_value(sp["prefill_s"], "s")
    assert shown["Decode step (mean over the output)"] == fmt_value(sp["decode_step_s"], "s")
    assert shown["Aggregate decode throughput"] == fmt_value(sp["tokens_per_s"], "tokens/s")
    assert shown["Per-user decode rate"] == fmt_value(sp["tokens_per_s_per_user"], "tokens/s")
    assert shown["Total per GPU"] == fmt_value(mem["total_bytes_per_gpu"], "B")
    assert shown["KV cache per GPU (batch)"] == fmt_value(mem["kv_bytes_per_gpu"], "B")
    assert shown["Concurrent sequences per replica (paged)"] == fmt_value(mem["max_sequences"], "seq")
    assert shown["Decode step (mean over the output)"] != "13.5 ms"
    # every step is rendered as LaTeX (symbols, then numbers), and the textbook comparison is explained
    assert len(at.get("latex")) > 60
    assert any("textbook chain" in s.value for s in at.subheader)
    at.radio(key="math.view").set_value("Training").run()
    assert not at.exception and at.subheader and len(at.get("latex")) > 10


def test_speed_page_follows_the_sidebar(clear_cache, capsys):
    at = open_page("speed")
    before = metrics(at)
    # compute 3.681 + TP all-reduces 1.280 + fixed costs = 4.967 s with every projection at the ceiling (derived in
    # tests/test_speed.py); at TP 8 the output and down projections reduce over 1,024 and 3,584 rows, eta_d = 0.9696
    # (core.physics.gemm_shape, BF16 K0 = 989 / 3.35 = 295): the matmuls' 2.819 s become 2.907 s, compute 3.793 s,
    # 5.078 s in all
    assert before["Time to first token (one batch)"] == "5.08 s"
    assert any("decode is **memory**-bound" in i.value for i in at.info)
    at.number_input(key="cfg.batch").set_value(8).run()
    after = metrics(at)
    sp = cli_json(
        capsys,
        "speed",
        "--model",
        "llama-3.1-70b",
        "--gpus",
        "8",
        "--tp",
        "8",
        "--batch",
        "8",
        "--input",
        "4096",
        "--output",
        "4096",
        "--json",
    )
    assert (
        after["Time to first token (one batch)"]
        == fmt_value(sp["prefill_s"], "s")
        != before["Time to first token (one batch)"]
    )
    assert after["Per-user decode rate"] == fmt_value(sp["tokens_per_s_per_user"], "tokens/s")
    # turn on speculative decoding: its tab shows the speed-up
    at.selectbox(key="cfg.spec_method").set_value("eagle").run()
    assert not at.exception
    assert "Speculative speed-up per sequence" in metrics(at)


def test_bad_input_shows_no_traceback(clear_cache):
    at = open_page("speed")
    at.number_input(key="cfg.tp").set_value(3).run()
    assert not at.exception
    assert at.sidebar.error and at.warning


def test_speed_warns_when_the_batch_does_not_fit(clear_cache, capsys):
    from cli.main import main as cli_main

    at = AppTest.from_file(APP, default_timeout=60).run()
    at.switch_page("../pages/speed.py").run()
    # at the defaults only the note that the 4,096 + 4,096-token lengths drive the answer, no fit warning
    assert [w.value[:29] for w in at.warning] == ["The lengths drive this answer"]
    at.number_input(key="cfg.batch").set_value(400).run()  # 400 x 8,192 tokens of KV cannot fit on 8 x H100
    assert not at.exception
    assert any("assume the batch is resident" in w.value and "at most" in w.value for w in at.warning)
    assert (
        cli_main(
            [
                "speed",
                "--model",
                "llama-3.1-70b",
                "--gpus",
                "8",
                "--tp",
                "8",
                "--batch",
                "400",
                "--input",
                "4096",
                "--output",
                "4096",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["fits"] is False and "at most" in out["memory_reason"]


def test_speed_page_compares_expert_parallelism_for_moe(clear_cache):
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.selectbox(key="cfg.model").set_value("mixtral-8x7b").run()
    at.switch_page("../pages/speed.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("Expert parallelism" in h.value for h in at.subheader)
    table = next(df.value for df in at.dataframe if "EP" in df.value.columns and "decode step" in df.value.columns)
    assert list(table["EP"]) == [1, 8] and list(table["note"]) == ["current", ""]
    # the same tab compares the replica's attention layouts: Mixtral is MoE with 8 KV heads on TP 8 (none
    # replicated, so no DCP row); data-parallel attention puts its 8 experts one per rank
    assert any("Attention layouts" in h.value for h in at.subheader)
    lay = next(df.value for df in at.dataframe if "layout" in df.value.columns)
    assert list(lay["layout"]) == [
        "TP 8",
        "data-parallel attention, EP 8",
        "context parallelism 2",
        "context parallelism 4",
    ]
    assert list(lay["GPUs per replica"]) == [8, 8, 16, 32] and lay["note"].iloc[0] == "current"
