"""Take the view away: its full link (copied with one click), a one-page summary (Markdown or HTML) and every table
on the page as CSV.

A page's headline cards, its verdicts and its tables are recorded as the page draws them (:func:`card`,
:func:`note`, :func:`table`, called by :mod:`dashboard.render`), so the summary holds exactly the texts the page
shows: the same formatted numbers, never numbers formatted a second time. :func:`begin` starts a page's record
(``dashboard/app.py``, before the page runs) and :func:`bar` draws the share controls once it has run.
"""

from __future__ import annotations

import html
import io
import json
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import pandas as pd
import streamlit as st

from core.base import REGISTRY, fmt_latency, sig
from core.config import RabitConfig

KEY = "_takeaway"


@dataclass
class Record:
    """What one run of a page showed: its title, headline cards, verdicts and tables."""

    title: str
    path: str
    cards: list[tuple[str, str, str]] = field(default_factory=list)  # (label, value, range text)
    notes: list[tuple[str, str]] = field(default_factory=list)  # (kind, text): success, info, warning, error, text
    tables: list[tuple[str, pd.DataFrame]] = field(default_factory=list)
    #: inputs the page itself takes beyond the sidebar's (label, text): a fleet's workloads, an uploaded file
    inputs: list[tuple[str, str]] = field(default_factory=list)


def begin(title: str, path: str) -> None:
    """Start the record of the page about to run (its title and url path)."""
    st.session_state[KEY] = Record(title=title, path=path)


def _record() -> Record | None:
    r = st.session_state.get(KEY)
    return r if isinstance(r, Record) else None


def card(label: str, value: str, range_text: str = "") -> None:
    """A headline card as drawn: its label, its value and the range under it (all as shown)."""
    r = _record()
    if r is not None and len(r.cards) < 60:
        r.cards.append((label, value, range_text))


def note(kind: str, text: str) -> None:
    """A verdict or explanation as drawn (``kind``: success, info, warning, error or text)."""
    r = _record()
    if r is not None and len(r.notes) < 40:
        r.notes.append((kind, text))


def table(name: str, df: pd.DataFrame) -> None:
    """A table as drawn, for the page's CSV download."""
    r = _record()
    if r is not None and len(r.tables) < 30:
        r.tables.append((name, df))


def inputs(label: str, text: str) -> None:
    """An input the page took (beyond the sidebar's configuration), named in its summary and its tables' zip."""
    r = _record()
    if r is not None and len(r.inputs) < 60:
        r.inputs.append((label, text))


# --- links --------------------------------------------------------------------------------------------------


def app_url() -> str:
    """The app's address in the visitor's browser without the page's path ("https://rabit.example.org"), or ""
    where the browser did not say (a test run)."""
    url = (st.context.url or "").split("?")[0].rstrip("/")
    r = _record()
    if r is not None and r.path and url.endswith("/" + r.path):
        url = url[: -len(r.path) - 1]
    return url


def link(query: dict[str, str] | None = None, path: str | None = None) -> str:
    """The full link of a view: the app's address, the page's path and ``query`` (default: this view's)."""
    r = _record()
    page = r.path if path is None and r is not None else (path or "")
    q = {k: v for k, v in (query if query is not None else st.query_params.to_dict()).items()}
    base = app_url() + ("/" + page if page else "/")
    return base + ("?" + urlencode(q) if q else "")


def analysis_link(analysis_id: str) -> str:
    """The full link that opens a saved analysis (on the app's first page)."""
    return link({"analysis": analysis_id}, path="")


# --- the summary -------------------------------------------------------------------------------------------

_MD_ESCAPE = re.compile(r"([\\`*_{}\[\]<>()#+\-!|~])")


def _md(text: str) -> str:
    """Plain text in Markdown: every character Markdown would read as markup is escaped."""
    return _MD_ESCAPE.sub(r"\\\1", str(text))


def _plain(text: str) -> str:
    """The page's text without its Markdown markers (``**``, ``:green[...]``)."""
    text = re.sub(r":(?:green|red|orange|blue|gray|violet)\[([^\]]*)\]", r"\1", str(text))
    return text.replace("**", "").replace("`", "")


def _context(cfg: RabitConfig | None, rec: Record | None = None) -> list[tuple[str, str]]:
    """The view's configuration, targets and assumptions in force, and the inputs the page itself took
    (``rec.inputs``), as (label, text) lines."""
    own = list(rec.inputs) if rec is not None else []
    if cfg is None:
        return own
    out = [
        ("Model", cfg.model_label),
        (
            "GPUs",
            f"{cfg.gpus:,} x {cfg.gpu} ({cfg.nodes} node{'s' if cfg.nodes != 1 else ''}), TP {cfg.tp}, PP {cfg.pp}",
        ),
        ("Request", f"{cfg.input_tokens:,} prompt + {cfg.output_tokens:,} output tokens, batch {cfg.batch}"),
    ]
    t = cfg.targets
    targets = [
        f"p95 {name} ≤ {fmt_latency(v)}"
        for name, v in (("TTFT", t.p95_ttft_s), ("ITL", t.p95_itl_s), ("end-to-end", t.p95_e2e_s))
        if v
    ]
    if t.deadline_days:
        targets.append(f"training within {sig(t.deadline_days)} days")
    if targets:
        out.append(("Targets", "; ".join(targets)))
    changed = [
        f"{info.label} {sig(getattr(cfg.assumptions, n), 4)} {info.unit} (base {sig(info.base, 4)})"
        for n, info in REGISTRY.items()
        if getattr(cfg.assumptions, n) != info.base
    ]
    out.append(("Assumptions", "; ".join(changed) if changed else "every efficiency assumption at its base value"))
    return own + out


def summary_markdown(rec: Record, cfg: RabitConfig | None, url: str, when: str) -> str:
    """The one-page summary of a page's run in Markdown."""
    lines = [f"# RA-BIT: {_md(rec.title)}", "", f"Link: <{url}>" if url.startswith("http") else f"Link: `{url}`", ""]
    lines += [f"Generated {when}.", ""]
    if rec.notes:
        lines += [("- " if kind != "text" else "") + _md(_plain(text)) for kind, text in rec.notes] + [""]
    if rec.cards:
        lines += ["| Number | Value | Range |", "|---|---|---|"]
        lines += [f"| {_md(a)} | {_md(b)} | {_md(c)} |" for a, b, c in rec.cards] + [""]
    ctx = _context(cfg, rec)
    if ctx:
        lines += ["## The view", ""] + [f"- **{_md(k)}**: {_md(v)}" for k, v in ctx] + [""]
    return "\n".join(lines)


def summary_html(rec: Record, cfg: RabitConfig | None, url: str, when: str) -> str:
    """The same summary as a self-contained HTML page (every text escaped; no script, no remote resource)."""
    e = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>RA-BIT: {e(rec.title)}</title>",
        "<style>body{font-family:sans-serif;max-width:60rem;margin:2rem auto;color:#24292f}"
        "table{border-collapse:collapse}td,th{border:1px solid #d0d7de;padding:.3rem .6rem;text-align:left}"
        ".success{color:#1a7f37}.warning{color:#9a6700}.error{color:#cf222e}</style></head><body>",
        f"<h1>RA-BIT: {e(rec.title)}</h1>",
        f"<p>Link: <a href='{e(url, quote=True)}'>{e(url)}</a><br>Generated {e(when)}.</p>",
    ]
    if rec.notes:
        parts.append("<ul>" + "".join(f"<li class='{e(k)}'>{e(_plain(t))}</li>" for k, t in rec.notes) + "</ul>")
    if rec.cards:
        parts.append("<table><tr><th>Number</th><th>Value</th><th>Range</th></tr>")
        parts += [f"<tr><td>{e(a)}</td><td><b>{e(b)}</b></td><td>{e(c)}</td></tr>" for a, b, c in rec.cards]
        parts.append("</table>")
    ctx = _context(cfg, rec)
    if ctx:
        parts.append("<h2>The view</h2><ul>" + "".join(f"<li><b>{e(k)}</b>: {e(v)}</li>" for k, v in ctx) + "</ul>")
    parts.append("</body></html>")
    return "".join(parts)


def tables_zip(rec: Record, cfg: RabitConfig | None = None) -> bytes:
    """Every table of the page's run, one CSV each, in a zip, with ``inputs.csv``: the inputs they were computed
    from (the page's own and the view's configuration, targets and assumptions); a note when the page has no
    table, saying what it shows instead."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("inputs.csv", pd.DataFrame(_context(cfg, rec), columns=["input", "value"]).to_csv(index=False))
        if not rec.tables:
            shown = [f"{a}: {b}" + (f" ({c})" if c else "") for a, b, c in rec.cards] + [
                _plain(t) for _, t in rec.notes
            ]
            z.writestr(
                "README.txt",
                f"The page {rec.title} showed no table"
                + (": what it showed instead follows.\n" + "\n".join(shown) if shown else ".")
                + "\n",
            )
        seen: dict[str, int] = {"inputs": 1}
        for name, df in rec.tables:
            stem = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "table"
            seen[stem] = seen.get(stem, 0) + 1
            z.writestr(f"{stem}{'' if seen[stem] == 1 else '-' + str(seen[stem])}.csv", df.to_csv(index=False))
    return buf.getvalue()


# --- the controls ------------------------------------------------------------------------------------------

#: The copy button: the browser's own address bar holds the whole view (the sidebar writes it there), so the
#: button copies that; where the page cannot read it the server's link stands in. A plain http intranet has no
#: clipboard API, so the fallback selects the text and copies it the old way.
_COPY = """<div style="font-family:sans-serif"><button id="b" title="{title}" style="padding:.35rem .8rem;border:1px solid
#d0d7de;border-radius:.4rem;background:#fff;cursor:pointer">Copy link</button> <span id="s" style="font-size:.8rem;
color:#57606a"></span></div><script>
const server = {server};
document.getElementById("b").addEventListener("click", async () => {{
  let url = server;
  try {{ url = window.parent.location.href || server; }} catch (e) {{}}
  const done = () => {{ document.getElementById("s").textContent = "copied"; }};
  try {{ await navigator.clipboard.writeText(url); done(); return; }} catch (e) {{}}
  const t = document.createElement("textarea"); t.value = url; document.body.appendChild(t); t.select();
  try {{ document.execCommand("copy"); done(); }} catch (e) {{ document.getElementById("s").textContent = url; }}
  t.remove();
}});
</script>"""


def bar(where: Any, cfg: RabitConfig | None) -> None:
    """The share controls in ``where`` (the sidebar's top), drawn before the page runs: copy the view's link,
    download the page's summary as Markdown or HTML, and every table on it as CSV. The downloads are built when
    clicked, from the record the page filled as it drew (so a page that stops early still offers them)."""
    rec = _record()
    if rec is None:
        return
    url = link()
    stem = "rabit-" + (re.sub(r"[^a-z0-9]+", "-", rec.title.lower()).strip("-") or "view")

    def when() -> str:
        return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")

    with where:
        st.caption("Share this view, or take it away")
        with st.container(key="share_copy"):
            st.iframe(_COPY.format(title=html.escape(url, quote=True), server=_js_string(url)), height=42)
        st.caption("One-page summary")
        formats: tuple[tuple[str, Callable[..., str], str, str], ...] = (
            ("Markdown", summary_markdown, "md", "text/markdown"),
            ("HTML", summary_html, "html", "text/html"),
        )
        for col, (label, build, ext, mime) in zip(st.columns(2), formats):

            def data(build: Callable[..., str] = build) -> str:
                return build(rec, cfg, url, when())

            col.download_button(
                label,
                data,
                file_name=f"{stem}.{ext}",
                mime=mime,
                key=f"share.{ext}",
                on_click="ignore",
                help="the headline numbers with their ranges, the verdicts, the targets and the assumptions in force",
            )
        st.download_button(
            "Every table as CSV (zip)",
            lambda: tables_zip(rec, cfg),
            file_name=f"{stem}-tables.zip",
            mime="application/zip",
            key="share.csv",
            on_click="ignore",
        )


def _js_string(text: str) -> str:
    """``text`` as a JavaScript string literal that cannot end the script it sits in."""
    return json.dumps(text).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
