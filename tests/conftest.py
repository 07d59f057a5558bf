import pytest
import streamlit as st


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


def pytest_collection_modifyitems(config, items):
    """The files that hold a ``browser`` or ``slow`` test first, each file's tests in their own order.

    Under ``-n 2 --dist loadfile --no-loadscope-reorder`` (README) pytest-xdist hands the files out in this
    order, so the few long files (a browser test file takes minutes) start at once and the many short ones fill in
    beside them; by default it sorts the files by their number of tests, which hands the long files out last and
    leaves one process working alone at the end. Every worker collects the same order (it depends on the markers
    only), which xdist requires."""
    heavy = {item.path for item in items if item.get_closest_marker("browser") or item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in heavy)  # stable: the order within each group is kept
