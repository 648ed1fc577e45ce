"""The HTML report in a real headless Chromium (the system's, driven by Playwright): it loads
with no console error and no request off the file, every plot renders with a size, the power
trace zooms, hostile phase names stay text, and the numbers in the page equal windows.csv.

Needs ``pip install -e '.[browser]'`` and Chromium (``.ci/install-browser`` installs Debian's).
Without them the tests skip and say why; with ENERGYFRAME_BROWSER_REQUIRED=1 (CI) they fail.
"""

import os
import shutil

import pytest

from energyframe.report.html import write_report
from energyframe.results import rundir
from tests.report.test_report import EVIL, EVIL_TOO, assert_tables_equal_windows_csv, runs  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # Chromium loads a 5-MB page per test

#: a browser that never talks to the network (and needs no sandbox as root, nor a GPU)
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def _unavailable(reason: str):
    if os.environ.get("ENERGYFRAME_BROWSER_REQUIRED") == "1":
        pytest.fail(f"ENERGYFRAME_BROWSER_REQUIRED=1 but {reason}")
    pytest.skip(reason)


def chromium() -> str | None:
    for candidate in (os.environ.get("ENERGYFRAME_CHROMIUM"), "/usr/bin/chromium"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed: pip install -e '.[browser]'")
    executable = chromium()
    if executable is None:
        _unavailable("no Chromium (/usr/bin/chromium or on PATH): run .ci/install-browser")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield b
        b.close()


class Opened:
    """A page opened from a file, with everything that went wrong while it loaded."""

    def __init__(self, browser, path):
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))

        def route(r):
            if r.request.url.startswith(("file:", "data:", "blob:")):
                r.continue_()
            else:
                self.requests.append(r.request.url)
                r.abort()

        self.page.route("**/*", route)
        self.page.goto(path.as_uri())
        # plotly marks a drawn plot with js-plotly-plot
        self.page.wait_for_function(
            "document.querySelectorAll('div.plot').length > 0 && "
            "document.querySelectorAll('div.plot:not(.js-plotly-plot)').length === 0",
            timeout=60_000,
        )

    def plots(self) -> list[dict]:
        return self.page.eval_on_selector_all(
            "div.plot",
            """divs => divs.map(d => {
                const box = d.getBoundingClientRect();
                const svg = d.querySelector('.main-svg');
                const inner = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
                return {id: d.dataset.figure, width: box.width, height: box.height,
                        svgWidth: inner.width, svgHeight: inner.height,
                        traces: (d._fullData || []).length,
                        drawn: d.querySelectorAll('.trace, .heatmaplayer image, .barlayer path').length};
            })""",
        )

    def tables(self, cls: str):
        """Like tests/test_report.tables, from the live DOM: (attrs, rows of (field, value, text))."""
        found = self.page.eval_on_selector_all(
            f"table.{cls}",
            """ts => ts.map(t => Array.from(t.querySelectorAll('tbody tr')).map(tr =>
                Array.from(tr.querySelectorAll('td')).map(td =>
                    [td.dataset.field || '', td.dataset.value || '', td.textContent])))""",
        )
        return [({"class": cls}, rows) for rows in found]


def check_loaded_cleanly(opened: Opened):
    assert opened.errors == []
    assert opened.requests == []
    assert opened.dialogs == []
    plots = opened.plots()
    assert plots
    for plot in plots:
        assert plot["width"] > 100 and plot["height"] > 100, plot
        assert plot["svgWidth"] > 100 and plot["svgHeight"] > 100, plot
        assert plot["traces"] > 0 and plot["drawn"] > 0, plot


def test_comparison_page_in_chromium(browser, runs, tmp_path):  # noqa: F811
    dirs = [runs["evil"], runs["evil_hot"]]
    # power is 100 W against 130 W whatever the machine's speed; the energy per iteration
    # follows how long a step took, which a loaded machine changes from one run to the next
    path = write_report(rundir.load_all(dirs), tmp_path / "comparison.html", figures=("time", "energy", "power"))
    opened = Opened(browser, path)
    check_loaded_cleanly(opened)
    page = opened.page
    # hostile names are text on the page, not markup
    cells = page.locator("table.summary td").all_text_contents()
    assert EVIL in cells and EVIL_TOO in cells
    assert page.locator("table.summary img").count() == 0
    # the numbers in the page are those in windows.csv
    assert_page_numbers_equal_windows_csv_dom(opened, dirs)
    comparison = opened.tables("comparison")[0][1]
    assert any(text.startswith("1.30× more power") for row in comparison for _, _, text in row)


def assert_page_numbers_equal_windows_csv_dom(opened: Opened, dirs):
    assert_tables_equal_windows_csv(opened.tables("windows"), opened.tables("summary"), dirs)


def test_power_trace_zooms(browser, runs, tmp_path):  # noqa: F811
    path = write_report([rundir.load(runs["evil"])], tmp_path / "one.html")
    opened = Opened(browser, path)
    check_loaded_cleanly(opened)
    page = opened.page
    trace = page.locator("section.run div.plot").first
    trace.scroll_into_view_if_needed()
    before = page.evaluate("d => d.layout.xaxis.range.slice()", trace.element_handle())
    drag = trace.locator(".nsewdrag").first.bounding_box()
    y = drag["y"] + drag["height"] / 2
    page.mouse.move(drag["x"] + 0.3 * drag["width"], y)
    page.mouse.down()
    page.mouse.move(drag["x"] + 0.45 * drag["width"], y, steps=5)
    page.mouse.move(drag["x"] + 0.6 * drag["width"], y, steps=5)
    page.mouse.up()
    page.wait_for_function(
        "([d, w]) => d.layout.xaxis.range[1] - d.layout.xaxis.range[0] < 0.5 * w",
        arg=[trace.element_handle(), before[1] - before[0]],
    )
    after = page.evaluate("d => d.layout.xaxis.range.slice()", trace.element_handle())
    assert before[0] < after[0] < after[1] < before[1]
    assert opened.errors == []


def test_pipeline_and_sweep_page_in_chromium(browser, runs, tmp_path):  # noqa: F811
    path = write_report(rundir.load_all([runs["pipeline"], runs["sweep"]]), tmp_path / "workloads.html")
    opened = Opened(browser, path)
    check_loaded_cleanly(opened)
    ids = {p["id"] for p in opened.plots()}
    assert len(ids) >= 6  # comparison bars, two traces, stage bars, heatmaps, speedup, energy-latency
    heatmaps = opened.page.locator("div.plot .heatmaplayer image").count()
    assert heatmaps >= 1
    assert_page_numbers_equal_windows_csv_dom(opened, [runs["pipeline"], runs["sweep"]])
