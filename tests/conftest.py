import pytest
import streamlit as st


@pytest.fixture
def clear_cache():
    """st.cache_data outlives one AppTest; clear it so each UI test computes afresh."""
    st.cache_data.clear()
    yield
    st.cache_data.clear()
