"""Meeting-room checks in headless Chromium: nothing is fetched from outside the server, and every page
reads at a projector's 1280 x 720 and a desk's 1920 x 1080."""

from pathlib import Path
from urllib.parse import urlparse

import live
import pytest

pytestmark = pytest.mark.browser

live.require_chromium()


PAGES = ("memory", "speed", "serving", "training", "optimizer", "math")
#: one text each page shows once its first results are drawn
READY = {
    "memory": "KV cache per GPU (batch)",
    "speed": "Prefill is",
    "serving": "Where is the knee?",
    "training": "Runtime against GPU count",
    "optimizer": "Why this answer",
    "math": "Final numbers",
}


@pytest.fixture(scope="module")
def server():
    with live.server() as url:
        yield url


def test_nothing_is_fetched_from_outside_the_server(server, browser):
    """Every request of every page goes to the server itself (an offline intranet reaches nothing else).

    Requests elsewhere are recorded and refused, so the test neither waits on nor needs the internet."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 720})
    outside: list[str] = []
    hosts: set[str] = set()

    def route(r):
        host = urlparse(r.request.url).hostname
        if r.request.url.startswith(("data:", "blob:")) or host == "127.0.0.1":
            hosts.add(host or "data")
            return r.continue_()
        outside.append(r.request.url)
        return r.abort()

    ctx.route("**/*", route)
    page = ctx.new_page()
    for name in PAGES:
        page.goto(f"{server}/" + ("" if name == "memory" else name))
        page.get_by_text(READY[name]).first.wait_for(timeout=120_000)
        live.settle(page)  # the script done and the page quiet: a websocket page under load may never go network-idle
    icon = page.locator("link[rel*=icon]").first.get_attribute("href") or ""
    ctx.close()
    assert outside == [], f"fetched from outside the server: {outside}"
    assert hosts == {"127.0.0.1"} or hosts == {"127.0.0.1", "data"}
    # the tab icon is served by the server itself (a :material/...: icon points at an external font host)
    assert icon.startswith(("/", server, "./", "data:")) or urlparse(icon).hostname in (None, "127.0.0.1"), icon


#: Run in the page: every way a chart or a number can be hard to read, as a list of strings.
LAYOUT_PROBLEMS_JS = r"""
() => {
  const out = [];
  const vis = (el) => { const r = el.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  const box = (el) => el.getBoundingClientRect();
  const hit = (a, b) => a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  for (const sel of ['[data-testid="stMetricLabel"]', '[data-testid="stMetricValue"]']) {
    for (const el of document.querySelectorAll(sel)) {
      if (!vis(el)) continue;
      for (const t of [el, ...el.querySelectorAll('*')]) {
        if (t.scrollWidth > t.clientWidth + 1 && getComputedStyle(t).overflow !== 'visible') {
          out.push('truncated: ' + el.innerText.trim()); break;
        }
      }
    }
  }
  for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    if (!vis(gd) || !gd._fullLayout) continue;
    const fl = gd._fullLayout, g = box(gd);
    const title = gd.querySelector('.gtitle');
    const name = (title && title.textContent) || '(untitled chart)';
    if (title) {
      const t = box(title);
      if (t.left < g.left - 1 || t.right > g.right + 1) out.push('title cut: ' + name);
    }
    const legend = gd.querySelector('.legend');
    if (legend && vis(legend)) {
      const l = box(legend);
      if (l.right > g.right + 1 || l.left < g.left - 1 || l.bottom > g.bottom + 1) out.push('legend cut: ' + name);
      for (const sel of ['.g-xtitle', '.g-x2title', '.g-ytitle', '.g-y2title', '.gtitle']) {
        for (const t of gd.querySelectorAll(sel)) {
          if (t.textContent && hit(box(t), l)) out.push('legend over ' + sel + ': ' + name);
        }
      }
      for (const ticks of gd.querySelectorAll('.xtick text')) {
        if (hit(box(ticks), l)) { out.push('legend over x ticks: ' + name); break; }
      }
    }
    for (const [k, ax] of Object.entries(fl)) {
      if (!/^[xy]axis\d*$/.test(k) || !ax || ax.visible === false) continue;
      if (ax.type === 'log' && Math.abs(ax.range[1] - ax.range[0]) > 12)
        out.push(`log axis ${k} spans ${Math.abs(ax.range[1] - ax.range[0]).toFixed(0)} decades: ` + name);
      // a log axis labelled by decade: no label twice ("5 2 100 5 2" reads 0.5 and 5 the same)
      if (ax.type === 'log' && ax._vals) {
        const texts = ax._vals.map(v => v.text).filter(t => t !== '');
        if (new Set(texts).size < texts.length) out.push(`log axis ${k} repeats a tick label: ` + name);
      }
    }
    for (const tr of gd._fullData || []) {
      if (tr.type !== 'bar' || tr.visible === false) continue;
      const ax = fl[(tr.orientation === 'h' ? tr.xaxis : tr.yaxis).replace(/^([xy])/, '$1axis')];
      if (ax && ax.type === 'log') out.push('bars on a log axis: ' + name);
    }
    // a category label left of the chart's own box is clipped (the tornado's long assumption labels were)
    for (const t of gd.querySelectorAll('.ytick text')) {
      if (t.textContent && vis(t) && box(t).left < g.left - 1) { out.push('y label cut: ' + name); break; }
    }
    for (const tr of gd.data || []) {
      if (tr.type !== 'bar' || tr.orientation !== 'h' || !tr.y || typeof tr.y[0] !== 'string') continue;
      const n = new Set(tr.y).size;
      const shown = gd.querySelectorAll('.ytick text').length;
      if (n > 1 && shown < n) out.push(`only ${shown} of ${n} bar labels shown: ` + name);
    }
  }
  return out;
}
"""


DRAWN_JS = """() => [...document.querySelectorAll('[data-testid="stPlotlyChart"]')]
    .filter(c => c.getBoundingClientRect().width > 0)
    .every(c => { const gd = c.querySelector('.js-plotly-plot'); return gd && gd._fullLayout && gd.querySelector('.main-svg'); })"""


def wait_drawn(page) -> None:
    """Until the script has finished and the page has settled (tests/live.py: settle), and every visible chart is
    drawn (a check before that passes vacuously)."""
    live.settle(page)
    page.wait_for_function(DRAWN_JS, timeout=120_000, polling=100)


def _open_tabs_and_collect(page) -> list[str]:
    """Problems on the page as drawn, then on each further tab of every tab bar."""
    wait_drawn(page)
    problems = list(page.evaluate(LAYOUT_PROBLEMS_JS))
    tabs = page.locator('[data-baseweb="tab"]')
    for i in range(tabs.count()):
        if tabs.nth(i).get_attribute("aria-selected") == "true":
            continue
        tabs.nth(i).click()
        wait_drawn(page)
        problems += [f"[{tabs.nth(i).inner_text()}] {p}" for p in page.evaluate(LAYOUT_PROBLEMS_JS)]
    return problems


@pytest.mark.parametrize("size", [(1280, 720), (1920, 1080)], ids=["1280x720", "1920x1080"])
def test_every_page_reads_at_meeting_sizes(server, browser, size):
    """No truncated metric, cut chart title, legend over an axis title, skipped bar label or runaway log axis."""
    ctx = browser.new_context(viewport={"width": size[0], "height": size[1]})
    page = ctx.new_page()
    found = []
    for name in PAGES:
        page.goto(f"{server}/" + ("" if name == "memory" else name))
        page.get_by_text(READY[name]).first.wait_for(timeout=120_000)
        live.settle(page)  # the script done and the page quiet: a websocket page under load may never go network-idle
        found += [f"{name}: {p}" for p in dict.fromkeys(_open_tabs_and_collect(page))]
    ctx.close()
    assert found == [], "\n".join(found)


#: Every page's own path, the first page's included (served at "/" and at its own path).
PATHS = (
    "",
    "memory",
    "speed",
    "serving",
    "training",
    "optimizer",
    "video",
    "math",
    "next-experiment",
    "diagnostics",
    "analyses",
    "calibration",
    "compare",
)
#: Run in the page: the first headline (a metric card, else the first alert) and any dialog or exponent on show.
FIRST_VIEW_JS = r"""
() => {
  const main = document.querySelector('[data-testid="stMain"]') || document.body;
  const visible = (el) => { const r = el.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  const metric = [...main.querySelectorAll('[data-testid="stMetric"]')].find(visible);
  const alert = [...main.querySelectorAll('[data-testid="stAlert"]')].find(visible);
  const head = metric || alert;
  const r = head ? head.getBoundingClientRect() : null;
  const text = main.innerText + ' ' + [...main.querySelectorAll('svg text')].map(t => t.textContent).join(' ');
  const exp = text.match(/(?<![\w.])\d+(?:\.\d+)?e[+-]\d+\b/g) || [];
  return {
    kind: metric ? 'metric' : alert ? 'alert' : 'none',
    bottom: r ? r.bottom : null,
    dialog: [...document.querySelectorAll('[role="dialog"]')].map(d => d.innerText.slice(0, 80)),
    exponents: exp.slice(0, 5),
  };
}
"""


def test_every_path_opens_with_its_answer_in_the_first_viewport(server, browser):
    """At 1280 x 720 every page's own path opens without a dialog ("Page not found" at /memory was one), its
    headline cards (or, on a page without cards, its first verdict) lie inside the first viewport, and no visible
    text shows a number in Python's exponent form."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 720})
    page = ctx.new_page()
    found = []
    for path in PATHS:
        page.goto(f"{server}/{path}")
        page.wait_for_selector(
            '[data-testid="stMain"] [data-testid="stMetric"], [data-testid="stMain"] [data-testid="stAlert"]',
            timeout=live.SETTLE_S * 1000,
        )
        wait_drawn(page)
        got = page.evaluate(FIRST_VIEW_JS)
        name = path or "/"
        if got["dialog"]:
            found.append(f"{name}: a dialog opens: {got['dialog']}")
        if got["kind"] == "none":
            found.append(f"{name}: no headline card and no verdict")
        if got["bottom"] is not None and got["bottom"] > 720:
            found.append(f"{name}: the first {got['kind']} ends at {got['bottom']:.0f} px, below the 720 px viewport")
        if got["exponents"]:
            found.append(f"{name}: exponent form on screen: {got['exponents']}")
    ctx.close()
    assert found == [], "\n".join(found)


def test_copy_the_link_download_the_summary_and_compare(server, browser, tmp_path):
    """The sidebar's copy button puts the view's full link on the clipboard, and the link opens the same view; the
    summary downloads with the page's headline as shown; a pasted link compares on the Compare page (the p95s under load)."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 720}, accept_downloads=True)
    ctx.grant_permissions(["clipboard-read", "clipboard-write"], origin=server)
    page = ctx.new_page()
    page.goto(f"{server}/speed?batch=16")
    page.get_by_text("Prefill is").first.wait_for(timeout=120_000)
    wait_drawn(page)
    decode = page.locator('[data-testid="stMetric"]').filter(has_text="Decode step").first.inner_text()
    page.frame_locator("iframe").first.get_by_role("button", name="Copy link").click()
    page.frame_locator("iframe").first.get_by_text("copied").wait_for(timeout=10_000)
    url = page.evaluate("navigator.clipboard.readText()")
    assert url.startswith(server + "/speed?") and "batch=16" in url
    with page.expect_download() as dl:
        page.get_by_role("button", name="Markdown").click()
    text = Path(dl.value.path()).read_text()
    value = decode.splitlines()[1].strip() if "\n" in decode else decode
    assert "# RA-BIT: Speed" in text and value.replace(".", "\\.") in text, (value, text[:400])
    other = ctx.new_page()  # the copied link opens the same view elsewhere
    other.goto(url)
    other.get_by_text("Prefill is").first.wait_for(timeout=120_000)
    wait_drawn(other)
    assert other.locator('[data-testid="stMetric"]').filter(has_text="Decode step").first.inner_text() == decode
    other.goto(f"{server}/compare")
    other.get_by_text("RA-BIT link").first.wait_for(timeout=60_000)
    box = other.get_by_label("RA-BIT link")
    box.fill(url.replace("batch=16", "batch=64"))
    box.press("Enter")
    other.get_by_text("p95 TTFT (B)").first.wait_for(timeout=120_000)
    wait_drawn(other)
    body = other.inner_text('[data-testid="stMain"]')
    # the p95s under load with their difference; the differing inputs' rows (a canvas) are read by AppTest
    assert "against A" in body and "p95 end-to-end (B)" in body and "Inputs that differ" in body, body[:2000]
    ctx.close()
