"""Saved analyses in the dashboard: the open analysis, save with optimistic concurrency, open by link,
runs, calibration, and the optional login.

The open analysis lives in ``st.session_state["_analysis"]`` as ``{"id", "revision", "name"}``: the
revision is the one this session loaded or last saved, the token a save presents. ``?analysis=<id>`` in
the URL opens it (see :func:`open_from_link`, called by the sidebar before its widgets are drawn).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import streamlit as st

from core.base import sig
from core.config import RabitConfig
from core.decision import MetricCalibration, analysis_headline, calibrate_all
from core.operations import Run, Telemetry, to_payload
from dashboard import cache

KEY = "_analysis"


def store():
    """The store ``RABIT_DATABASE_URL`` names, else the embedded SQLite file (one per server process)."""
    from store import database_url

    return cache.store(database_url())


def store_or_stop():
    """The store for a page; when it cannot be opened, say why (never a traceback) and stop the page."""
    try:
        return store()
    except Exception as exc:  # noqa: BLE001 - a bad URL or an unreachable server is the operator's to fix
        from dashboard.text import plain

        logging.getLogger(__name__).error("the analysis store cannot be opened: %s", exc)  # for the operator
        st.error(
            f"The analysis store cannot be opened ({plain(type(exc).__name__)}). The server's operator can check "
            "RABIT_DATABASE_URL or RABIT_DATA_DIR; the details are in the server's log."
        )
        st.stop()


def store_kind() -> str:
    """Where analyses are kept, in words a visitor may read: the kind of database, never its path or address."""
    from store import database_url

    try:
        url = database_url()
    except OSError:
        return "this server's database"
    return "the deployment's PostgreSQL database" if url.startswith("postgresql") else "this server's SQLite file"


# --- login (optional) ------------------------------------------------------------------------------


def login_enabled() -> bool:
    """``RABIT_LOGIN=1`` turns Streamlit's OIDC login on (needs an ``[auth]`` section in secrets.toml)."""
    return os.environ.get("RABIT_LOGIN", "").strip().lower() in ("1", "true", "yes", "on")


def current_user() -> str | None:
    """The logged-in user's e-mail (or name) when login is on, else None."""
    if not login_enabled():
        return None
    try:
        if not st.user.is_logged_in:
            return None
        return str(st.user.get("email") or st.user.get("name") or "")
    except (AttributeError, KeyError):
        return None


def require_login() -> None:
    """When login is on and nobody is logged in: a login button, and stop."""
    if not login_enabled() or current_user():
        return
    st.title("RA-BIT")
    st.info("This RA-BIT server asks you to log in; analyses you save record you as their owner.")
    try:
        st.button("Log in", on_click=st.login, type="primary")
    except Exception as exc:  # noqa: BLE001 - a misconfigured provider is shown, not raised
        st.error(f"Login is on (RABIT_LOGIN) but cannot start: {exc}")
    st.stop()


# --- the open analysis -----------------------------------------------------------------------------


def current() -> dict[str, Any] | None:
    return st.session_state.get(KEY)


def _remember(aid: str, revision: int, name: str) -> None:
    st.session_state[KEY] = {"id": aid, "revision": revision, "name": name}
    st.query_params["analysis"] = aid  # the sidebar keeps it there on every rerun


def open_from_link(analysis_id: str) -> RabitConfig | None:
    """Open the analysis a link names; None (and a message for the sidebar) when it cannot be."""
    from store import NotFound

    try:
        a = store().get(analysis_id)
    except NotFound:
        st.session_state.setdefault("_link_error", []).append(f"analysis: no saved analysis with id {analysis_id!r}")
        return None
    except Exception as exc:  # noqa: BLE001 - the store being unreachable is shown, never a traceback
        st.session_state.setdefault("_link_error", []).append(
            f"analysis: the analysis store cannot be reached ({type(exc).__name__}: {exc})"
        )
        return None
    _remember(a.id, a.summary.revision, a.name)
    return a.config


def sidebar_badge() -> None:
    """In the sidebar: which saved analysis this view belongs to (nothing when none is open)."""
    cur = current()
    if cur:
        from dashboard.text import plain

        st.sidebar.caption(
            f"Saved analysis: **{plain(cur['name'])}**, revision {cur['revision']} (Saved analyses to save or close)"
        )


def close() -> None:
    st.session_state.pop(KEY, None)
    st.query_params.pop("analysis", None)


def query_extra() -> dict[str, str]:
    """What the sidebar adds to the URL so a pasted link reopens the analysis."""
    cur = current()
    return {"analysis": cur["id"]} if cur else {}


def save_new(name: str, cfg: RabitConfig, *, note: str, saved_by: str, results: dict[str, Any]) -> str:
    aid = store().create(name, cfg, results=results, note=note, saved_by=saved_by, owner=current_user())
    _remember(aid, 1, name.strip())
    return aid


def save_revision(
    cfg: RabitConfig, *, name: str, note: str, saved_by: str, results: dict[str, Any], on_top_of: int | None = None
) -> int:
    """Save a new revision of the open analysis; raises ``store.Conflict`` if someone saved meanwhile."""
    cur = current()
    assert cur is not None
    rev = store().save(
        cur["id"],
        cfg,
        expected_revision=on_top_of if on_top_of is not None else cur["revision"],
        name=name,
        results=results,
        note=note,
        saved_by=saved_by,
    )
    _remember(cur["id"], rev, name.strip())
    return rev


def headline(cfg: RabitConfig) -> dict[str, Any]:
    """The snapshot of headline results saved with each revision (core's, from the cached memory and speed)."""
    return analysis_headline(cfg, memory=cache.serving_memory, speed=cache.speed_summary)


def import_limits_note(upload_limit_mb: float) -> str:
    """What the page's upload takes and where a larger export goes (an analysis's export can outgrow an upload)."""
    from core.base import MAX_IMPORT_BYTES, fmt_bytes

    return (
        f"Uploads here are at most {sig(upload_limit_mb)} MB (the server's `server.maxUploadSize`). A larger export "
        f"imports with `rabit analyses import FILE`, which reads up to {fmt_bytes(MAX_IMPORT_BYTES)}: whatever "
        "`rabit analyses export` writes."
    )


def import_file(data: bytes, *, saved_by: str, owner: str | None) -> str:
    """Import an uploaded export (the bound, UTF-8, depth and finite numbers checked before it is parsed, as
    ``rabit analyses import`` checks them); raises ``ValueError`` (a ``StoreError`` included) saying why not."""
    from core.base import MAX_IMPORT_BYTES, parse_json

    return store().import_(parse_json(data, "the export", max_bytes=MAX_IMPORT_BYTES), saved_by=saved_by, owner=owner)


def attach_telemetry(analysis_id: str, tel: Telemetry) -> int:
    """Keep parsed telemetry with a saved analysis (its stored form); the new telemetry's id."""
    return store().add_telemetry(analysis_id, tel.fmt, to_payload(tel))


# --- runs and calibration --------------------------------------------------------------------------


def runs() -> tuple[tuple[int, Run], ...]:
    cur = current()
    if not cur:
        return ()
    try:
        return tuple((r.id, r.run) for r in store().get(cur["id"]).runs)
    except Exception:  # noqa: BLE001 - a deleted or unreachable analysis simply has no runs here
        return ()


def calibrations(cfg: RabitConfig) -> dict[str, MetricCalibration]:
    """The open analysis's calibration for the sidebar's GPU kind ({} without runs)."""
    rs = tuple(r for _, r in runs())
    if not rs:
        return {}
    return calibrate_all(cache.run_residuals(rs), cfg.gpu)


def show_calibrated(items: list[tuple[str, str, float | None]], cfg: RabitConfig) -> None:
    """Beside the analytical values: the calibrated value and interval, labelled with the run count.

    ``items``: (label, metric name, analytical value in seconds or tokens/s). Nothing is drawn when no
    comparable run exists.
    """
    from core.base import fmt_num, fmt_time

    cals = calibrations(cfg)
    shown = [(lab, cals[m], v) for lab, m, v in items if m in cals and v is not None]
    cur = current()
    if not shown or cur is None:
        return
    from dashboard.text import plain

    st.markdown(
        f"**Calibrated** from the measured runs of *{plain(cur['name'])}* (same GPU kind, same metric; see Calibration)"
    )
    from dashboard import render

    cols = st.columns(len(shown))
    for col, (lab, c, v) in zip(cols, shown):
        rg = c.range(v)  # a core.base.ranges.Range with basis "calibrated" and n_runs
        fmt = fmt_num if c.metric.startswith("throughput") else fmt_time
        band = "Student t, 95 %" if c.basis == "t" else "x0.7 … x1.3, fewer than 3 runs"
        render.metric_range(
            col,
            f"{lab} (calibrated, n={c.n})",
            fmt(rg.value),
            rg,
            fmt,
            help=f"analytical {fmt(v)} x factor {c.factor:.3f}; interval {band}; {c.n} comparable run(s)",
        )
        col.caption(f"analytical {fmt(v)} · x{c.factor:.2f}")
