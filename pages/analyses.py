"""Saved analyses: save this configuration, find, open, rename, delete and restore, export and import."""

import pandas as pd
import streamlit as st

from dashboard import analyses, cache, render, share, state
from dashboard.api import Conflict, StoreError, fmt_sig
from dashboard.text import plain

st.title("Saved analyses")
analyses.store_or_stop()
st.caption(
    "An analysis keeps the sidebar's whole configuration, a snapshot of the headline results, the measured runs "
    f"attached to it and a note; saving again keeps every earlier revision. Kept in {analyses.store_kind()}."
)
head = st.container()  # the picked analysis's headline numbers first (or why there are none)
cfg = state.config()
cur = analyses.current()
user = analyses.current_user()

# --- save --------------------------------------------------------------------------------------------
st.subheader("Save")
if cur:
    st.markdown(f"Open: **{plain(cur['name'])}**, revision {cur['revision']} · link: {share.analysis_link(cur['id'])}")
c1, c2 = st.columns(2)
name = c1.text_input("Name", value=cur["name"] if cur else "", key="an.name")
by = c2.text_input(
    "Saved by", value=user or "", key="an.by", disabled=bool(user), help="the logged-in user when login is on"
)
note = st.text_area("Note", key="an.note", height=80)
save_slot = st.container()
b1, b2, b3 = st.columns(3)
new_clicked = b1.button("Save as a new analysis", type="primary" if not cur else "secondary", disabled=cfg is None)
rev_clicked = b2.button("Save a new revision", disabled=cfg is None or not cur, type="primary" if cur else "secondary")
if cur and b3.button("Close the analysis"):
    analyses.close()
    st.rerun()
if cfg is None:
    save_slot.warning("Fix the highlighted input in the sidebar before saving.")

if new_clicked and cfg is not None:
    try:
        aid = analyses.save_new(name, cfg, note=note, saved_by=user or by, results=analyses.headline(cfg))
        save_slot.success(f"Saved as a new analysis: {plain(name)} · link {share.analysis_link(aid)}")
    except StoreError as exc:
        save_slot.error(plain(exc, 400))
if rev_clicked and cfg is not None:
    try:
        rev = analyses.save_revision(cfg, name=name, note=note, saved_by=user or by, results=analyses.headline(cfg))
        save_slot.success(f"Saved revision {rev} of {plain(name)}.")
    except Conflict as exc:
        st.session_state["an.conflict"] = exc.current
    except StoreError as exc:
        save_slot.error(plain(exc, 400))
if "an.conflict" in st.session_state and cur:
    current_rev = st.session_state["an.conflict"]
    save_slot.warning(
        f"Someone saved this analysis while you had it open: you opened revision {cur['revision']}, "
        f"the current one is {current_rev}. Nothing was overwritten. Save yours as revision "
        f"{current_rev + 1} on top of theirs (both are kept), or open theirs first."
    )
    k1, k2 = save_slot.columns(2)
    if k1.button(f"Save mine as revision {current_rev + 1}", key="an.force"):
        try:
            rev = analyses.save_revision(
                cfg, name=name, note=note, saved_by=user or by, results=analyses.headline(cfg), on_top_of=current_rev
            )
            st.session_state.pop("an.conflict")
            save_slot.success(f"Saved revision {rev}.")
        except Conflict as exc:
            st.session_state["an.conflict"] = exc.current
            st.rerun()
    k2.button("Open theirs", key="an.theirs", on_click=state.open_analysis, args=(cur["id"],))

# --- find and open -----------------------------------------------------------------------------------
st.subheader("Find")
search = st.text_input("Search by name, model or GPU", key="an.search")
rows = analyses.store().list(search, owner=None)
if not rows:
    render.say(
        "info",
        "No saved analyses yet: save this view below, then open it again by its link."
        if not search
        else f"Nothing matches {search!r}.",
        head if not search else None,
        limit=None if not search else 300,
    )
else:
    render.table(
        pd.DataFrame(
            [
                {
                    "name": r.name,
                    "model": r.model,
                    "GPU": r.gpu,
                    "revision": r.revision,
                    "updated (UTC)": r.updated_at[:19].replace("T", " "),
                    "saved by": r.saved_by,
                    "link": share.analysis_link(r.id),
                }
                for r in rows
            ]
        ),
        "saved analyses",
        column_config={"link": st.column_config.LinkColumn("link", display_text="open")},
    )
    pick = st.selectbox(
        "Analysis",
        [r.id for r in rows],
        key="an.pick",
        format_func=lambda i: next(f"{r.name} ({r.model} on {r.gpu}, rev {r.revision})" for r in rows if r.id == i),
    )
    c1, c2, c3 = st.columns(3)
    c1.button("Open", key="an.open", on_click=state.open_analysis, args=(pick,), type="primary")
    if c2.button("Delete", key="an.delete", help="moves it to the bin below; restorable"):
        analyses.store().delete(pick)
        if cur and cur["id"] == pick:
            analyses.close()
        st.rerun()
    c3.download_button(
        "Export (JSON)",
        analyses.store().export_text(pick),
        file_name=f"rabit-analysis-{pick}.json",
        mime="application/json",
        key="an.export",
    )
    with st.expander("Rename"):
        new_name = st.text_input("New name", key="an.rename_to")
        rename_slot = st.container()
        if st.button("Rename", key="an.rename"):
            try:
                analyses.store().rename(pick, new_name)
                if cur and cur["id"] == pick:
                    cur["name"] = new_name.strip()
                st.rerun()
            except StoreError as exc:
                rename_slot.error(plain(exc, 400))
    a = analyses.store().get(pick)
    with st.expander("Revisions"):
        render.table(
            pd.DataFrame(
                [
                    {
                        "revision": r.revision,
                        "name": r.name,
                        "saved by": r.saved_by,
                        "saved (UTC)": r.created_at[:19].replace("T", " "),
                        "note": r.note,
                    }
                    for r in a.revisions
                ]
            ),
            "revisions",
        )
        st.caption(
            f"{len(a.runs)} measured run(s) and {len(a.logs)} engine start-up log(s) attached"
            + (
                " ("
                + "; ".join(plain(f"{lg['name']}: {lg['engine']} {lg['log'].version}", 200) for lg in a.logs[-3:])
                + ")"
                if a.logs
                else ""
            )
            + ". Headline results at the last save: "
            + ", ".join(
                f"{k} = {fmt_sig(v, 4)}" if isinstance(v, float) else f"{k} = {v}" for k, v in a.results.items()
            )
        )

    # --- the picked analysis's headline numbers, recomputed with their ranges (drawn first, in the head) -------
    train = a.config.phase == "train"
    HEADLINE = render.HEADLINE
    try:
        with st.spinner("Evaluating the analysis at each assumption bound…"):
            saved_rng = cache.analysis_headline_ranges(a.config)
    except (ValueError, KeyError) as exc:  # a config today's catalog or model no longer accepts
        saved_rng = {}
        st.warning(f"{plain(a.name)} cannot be evaluated with today's catalog: {plain(exc, 300)}")
    shown = [k for k in render.headline_keys(train) if k in saved_rng]  # the core leaves out one not finite
    if shown:
        with head:
            st.subheader("Headline numbers, with ranges")
            st.caption(
                f"**{plain(a.name)}**, revision {a.revision}, computed now from its saved configuration; under each "
                "number its heuristic range from the assumption bounds."
            )
            cols = render.grid(len(shown), [HEADLINE[k][0] for k in shown])
            for i, k in enumerate(shown):
                label, fmt = HEADLINE[k]
                render.metric_range(cols[i % len(cols)], label, fmt(saved_rng[k].value), saved_rng[k], fmt)
        render.tornado_picker(
            {k: saved_rng[k] for k in shown},
            {k: HEADLINE[k][0].lower() for k in shown},
            "an",
            "step_s" if train else "decode_step_s",
        )

with st.expander("Deleted analyses (restore)"):
    binned = analyses.store().list(deleted=True)
    if not binned:
        st.caption("The bin is empty.")
    for r in binned:
        c1, c2 = st.columns([4, 1])
        c1.write(f"{plain(r.name)} ({r.model} on {r.gpu}), deleted {r.deleted_at[:19].replace('T', ' ')} UTC")
        if c2.button("Restore", key=f"an.restore.{r.id}"):
            analyses.store().restore(r.id)
            st.rerun()

# --- import ------------------------------------------------------------------------------------------
st.subheader("Import")
up = st.file_uploader(
    "An exported analysis (JSON)",
    type=["json"],
    key="an.import",
    help=analyses.import_limits_note(float(st.get_option("server.maxUploadSize"))),
)
if up is not None and st.button("Import", key="an.do_import"):
    try:
        aid = analyses.import_file(up.getvalue(), saved_by=user or by, owner=user)
        st.success(f"Imported as a new analysis · link {share.analysis_link(aid)}")
    except StoreError as exc:
        st.error(plain(exc, 400))
    except ValueError as exc:  # not UTF-8, too large or deep, not JSON
        st.error(f"That file cannot be imported: {plain(exc, 400)}")
