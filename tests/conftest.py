import pytest
import streamlit as st

#: Worker processes for a whole-suite run (``python -m pytest``, the README's and CI's command), when pytest-xdist
#: (the test extra) is installed: two, one per core of the 2-core CI machine, each taking whole test files
#: (``--dist loadfile``), so a module's server, browser, Ray head or installed wheel is started once, by the worker
#: that runs the module. A run naming files or tests, an explicit ``-n`` (``-n 0``: one process) or a missing
#: pytest-xdist keeps one process.
SUITE_WORKERS = 2


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """Run the whole suite on :data:`SUITE_WORKERS` workers; registered after pytest-xdist, this runs before its
    own ``pytest_cmdline_main``, which turns ``numprocesses`` into workers."""
    opt = config.option
    if (
        not config.pluginmanager.hasplugin("xdist")
        or getattr(opt, "numprocesses", 0) is not None  # -n given
        or hasattr(config, "workerinput")  # a worker itself
        or config.args_source != pytest.Config.ArgsSource.TESTPATHS  # files or tests named
        or opt.collectonly
        or getattr(opt, "usepdb", False)
    ):
        return
    opt.numprocesses = SUITE_WORKERS
    if opt.dist == "no":
        opt.dist = "loadfile"


@pytest.fixture
def clear_cache():
    """st.cache_data outlives one AppTest; clear it so each UI test computes afresh."""
    st.cache_data.clear()
    yield
    st.cache_data.clear()


@pytest.fixture(autouse=True)
def isolated_store(tmp_path, monkeypatch):
    """Every test gets its own empty embedded store (never the user's ~/.local/share/rabit)."""
    monkeypatch.setenv("RABIT_DATA_DIR", str(tmp_path / "rabit-data"))
    monkeypatch.delenv("RABIT_DATABASE_URL", raising=False)
    yield


@pytest.fixture(scope="module")
def browser():
    """Headless Debian chromium driven by Playwright, one per browser-test module."""
    import live
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=live.CHROMIUM, args=live.CHROMIUM_ARGS)
        yield b
        b.close()
