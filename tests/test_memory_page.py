"""The Memory page shows the core numbers and follows the sidebar."""

from pathlib import Path

from app_state import set_input
from streamlit.testing.v1 import AppTest

from core.base import fmt_value
from core.config import RabitConfig
from core.physics import serving_memory

APP = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")


def metrics(at, tab=0):
    """Metrics of one tab (0 = Serving, 1 = Training)."""
    return {m.label: m.value for m in at.tabs[tab].metric}


def test_worked_example_numbers_on_the_page(clear_cache):
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception
    shown = metrics(at)
    # the textbook example: 17.6 GB weights, ~11 GB KV (10.7 unrounded), 31 GB total of 85.9 GB
    assert shown["Weights per GPU"] == "17.6 GB"
    assert shown["KV cache per GPU (batch)"] == "10.7 GB"
    assert shown["Total per GPU"] == "31.1 GB"
    assert shown["HBM capacity per GPU"] == "85.9 GB"
    assert any("fits" in s.value for s in at.success)


def test_changing_batch_and_kv_dtype_updates_numbers(clear_cache):
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.number_input(key="cfg.batch").set_value(64).run()
    # 64 x 8,192 x 40,960 B = 21.5 GB
    assert metrics(at)["KV cache per GPU (batch)"] == "21.5 GB"
    at.selectbox(key="cfg.kv_dtype").set_value("fp8").run()
    assert metrics(at)["KV cache per GPU (batch)"] == "10.7 GB"
    expected = serving_memory(RabitConfig(batch=64, kv_dtype="fp8"))
    assert metrics(at)["Concurrent sequences per replica (paged)"] == fmt_value(expected.max_sequences, "seq")
    assert at.query_params["batch"] == ["64"] or at.query_params["batch"] == "64"


def test_invalid_input_shows_error_next_to_it_and_no_traceback(clear_cache):
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.number_input(key="cfg.tp").set_value(3).run()
    assert not at.exception
    assert any("does not divide the 64 attention heads" in e.value for e in at.sidebar.error)
    at.number_input(key="cfg.tp").set_value(8).run()
    assert not at.sidebar.error


def test_model_that_cannot_fit_says_why(clear_cache):
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.selectbox(key="cfg.model").set_value("llama-3.1-405b").run()
    assert any("cannot fit even at batch 1" in e.value for e in at.sidebar.error)
    assert any("does not fit" in e.value for e in at.error)


def test_link_reproduces_the_view(clear_cache):
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["model"] = "llama-3.1-8b"
    at.query_params["tp"] = "1"
    at.query_params["gpus_per_node"] = "1"
    at.run()
    assert at.selectbox(key="cfg.model").value == "llama-3.1-8b"
    # Llama-3.1-8B: 8.03e9 x 2 B = 16.1 GB on one GPU
    assert metrics(at)["Weights per GPU"] == "16.1 GB"


def test_bad_link_falls_back_with_message(clear_cache):
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["batch"] = "-5"
    at.run()
    assert not at.exception
    assert any("link" in e.value for e in at.sidebar.error)
    assert metrics(at)["Weights per GPU"] == "17.6 GB"


def test_tabs_are_lazy(clear_cache):
    """Only the chosen tab is computed and drawn: the Training tab is empty until it is chosen."""
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert metrics(at, tab=0) and not metrics(at, tab=1)
    set_input(at, "memory.tab", "Training")
    at.run()
    assert metrics(at, tab=1) and not metrics(at, tab=0)


def test_training_tab_zero_stages(clear_cache):
    at = AppTest.from_file(APP, default_timeout=60).run()
    set_input(at, "memory.tab", "Training")
    at.selectbox(key="cfg.zero").set_value(3).run()
    assert not at.exception
    labels = metrics(at, tab=1)
    assert "Optimizer state per GPU" in labels and "Gradients per GPU" in labels


LOGS = Path(__file__).resolve().parent / "fixtures" / "engine_logs"


def test_start_up_log_tab_pastes_a_log_and_refuses_another_programs(clear_cache):
    at = AppTest.from_file(APP, default_timeout=60).run()
    set_input(at, "memory.tab", "Start-up log")
    at.run()
    at.selectbox(key="cfg.model").set_value("llama-3.1-8b").run()
    text = (LOGS / "vllm_0.6.4dev_v0_llama3.1-8b_gpu-unknown_startup_fail_maxlen_gt_kv.log").read_text()
    at.text_area(key="mem.log.text").set_value(text).run()
    assert not at.exception
    table = at.dataframe[0].value
    assert table.loc[2, "log"] == "41,200"  # the KV cache size in tokens, read from the log
    assert any(s.value == "Out of memory start-up" for s in at.subheader)
    assert at.dataframe[1].value.loc[0, "cost"] == "free"  # the remedies, the free one first
    at.text_area(key="mem.log.text").set_value("hello\nworld\n").run()
    assert not at.exception and any("cannot be used" in e.value for e in at.error)


def test_the_long_context_tab_answers_the_million_token_questions(clear_cache):
    # Qwen2.5-7B-Instruct-1M on one L40S: a 1M-token sequence does not fit one GPU, context parallelism 2 fits it;
    # attention overtakes the matmuls at 131,072 tokens; GQA (4 KV heads for 28) saved 1 - 4/28 = 85.7 % of the KV
    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state["memory.tab"] = "Long context"
    at.run()
    at.selectbox(key="cfg.model").set_value("qwen2.5-7b-instruct-1m").run()
    at.selectbox(key="cfg.gpu").set_value("l40s").run()
    at.number_input(key="cfg.gpus_per_node").set_value(1).run()
    at.number_input(key="cfg.tp").set_value(1).run()
    assert not at.exception
    assert any("131,072 tokens" in i.value for i in at.info)
    fits, saved = at.dataframe[0].value, at.dataframe[1].value
    row = fits[fits["option"] == "context parallelism 2"].iloc[0]
    assert "1,010,000 tokens" in row["longest sequence"]
    assert not fits.iloc[0]["longest sequence"].startswith("1,010,000")  # one L40S stops short of the window
    assert saved.iloc[0]["saved"] == "85.7%"
