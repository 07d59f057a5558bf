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
