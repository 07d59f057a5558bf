"""Meeting-room checks in headless Chromium: nothing is fetched from outside the server, and every page
reads at a projector's 1280 x 720 and a desk's 1920 x 1080."""

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
    "training": "Runtime and cost against GPU count",
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
        page.wait_for_load_state("networkidle", timeout=30_000)
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
    """Until the script has finished and every visible chart is drawn (a check before that passes vacuously)."""
    page.wait_for_function("""() => !document.querySelector('[data-testid="stStatusWidget"]')""", timeout=120_000)
    page.wait_for_function(DRAWN_JS, timeout=60_000)
    page.wait_for_timeout(500)


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
        page.wait_for_load_state("networkidle", timeout=30_000)
        page.wait_for_timeout(1500)
        found += [f"{name}: {p}" for p in dict.fromkeys(_open_tabs_and_collect(page))]
    ctx.close()
    assert found == [], "\n".join(found)
