"""The only place with ``st.cache_data``: cached wrappers around ``core`` keyed on the frozen config."""

from __future__ import annotations

import streamlit as st

from core import memory as _memory
from core.config import RabitConfig


@st.cache_data(max_entries=256, show_spinner=False)
def serving_memory(cfg: RabitConfig) -> _memory.ServingMemory:
    return _memory.serving_memory(cfg)


@st.cache_data(max_entries=256, show_spinner=False)
def training_memory(cfg: RabitConfig) -> _memory.TrainingMemory:
    return _memory.training_memory(cfg)


@st.cache_data(max_entries=64, show_spinner=False)
def sequences_vs_context(cfg: RabitConfig, contexts: tuple[int, ...]) -> tuple[tuple[int, int, int], ...]:
    return _memory.sequences_vs_context(cfg, contexts)


@st.cache_data(max_entries=64, show_spinner=False)
def kv_per_token_across_catalog(kv_dtype: str) -> tuple[tuple[str, str, float], ...]:
    return _memory.kv_per_token_across_catalog(kv_dtype)


@st.cache_data(max_entries=64, show_spinner=False)
def training_memory_by_zero(cfg: RabitConfig) -> tuple[tuple[int, _memory.TrainingMemory], ...]:
    return _memory.training_memory_by_zero(cfg)
