"""Each kind of `zerosim plot` HTML opened in a real headless Chromium: no script errors, and
plotly drew every trace of the figure. A copy of the file gets a probe at the top of <head> that
records errors and, once the page has loaded, writes what it saw into the DOM, which
`--dump-dom` prints. Skips without a chromium or chrome binary (.ci/run installs Debian's)."""

import html
import json
import re
import shutil
import struct
import subprocess

import pytest

from zerosim.tradeoffs import figures

from tests.zerosim.results import REPORTS, write_sweep

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
PROBE = """<script>
window.zerosimErrors = [];
window.addEventListener("error", (e) => window.zerosimErrors.push(String(e.message)));
window.addEventListener("unhandledrejection", (e) => window.zerosimErrors.push(String(e.reason)));
const zerosimConsoleError = console.error;
console.error = (...args) => {
  window.zerosimErrors.push(args.join(" "));
  zerosimConsoleError(...args);
};
window.addEventListener("load", () => setTimeout(() => {
  const probe = document.createElement("pre");
  probe.id = "zerosim-probe";
  probe.textContent = JSON.stringify({
    errors: window.zerosimErrors,
    svgs: document.querySelectorAll(".main-svg").length,
    traces: [...document.querySelectorAll(".js-plotly-plot")]
      .map((p) => (p._fullData || []).length),
    ticks: [...document.querySelectorAll(".xaxislayer-above > g, .yaxislayer-above > g")]
      .reduce((out, g) => {  // each axis's labels as drawn, in tickvals' order ("x2tick": ...)
        (out[g.getAttribute("class")] ||= []).push(g.textContent);
        return out;
      }, {}),
  });
  document.body.appendChild(probe);
}, 500));  // after plotly's own deferred drawing
</script>"""


@pytest.fixture(scope="module")
def browser():
    """The first browser on PATH that runs (Ubuntu's chromium-browser may be a stub for a snap)."""
    for path in filter(None, map(shutil.which, BROWSERS)):
        if subprocess.run([path, "--version"], capture_output=True, timeout=60).returncode == 0:
            return path
    pytest.skip("no working chromium or chrome binary on PATH (apt-get install chromium)")


def render(browser, page, tmp_path):
    """What the probe saw in a copy of `page` loaded by headless Chromium (the timeout only stops
    a hung browser; how long a page takes to draw is no test's business)."""
    probed = tmp_path / f"probed-{page.name}"
    probed.write_text(page.read_text().replace("<head>", "<head>" + PROBE, 1))
    done = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'chromium-profile'}", "--virtual-time-budget=10000",
         "--dump-dom", probed.as_uri()], capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="zerosim-probe">(.*?)</pre>', done.stdout, re.S)
    assert found, f"no probe in the page (exit {done.returncode}): {done.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


def files_of_each_kind(tmp_path, rows, simulated):  # noqa: F811 (fixture values)
    sweep = write_sweep(tmp_path / "sweep.csv", rows)
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps(simulated[0]))
    reports = []
    for i, report in enumerate(REPORTS):
        reports.append(tmp_path / f"report{i}.json")
        reports[-1].write_text(json.dumps(report))
    return {"memory": [sweep], "tradeoff": [sweep], "timeline": [trace], "calibration": reports}


@pytest.mark.parametrize("kind", figures.KINDS)
def test_each_kind_renders_without_script_errors(browser, tmp_path, rows, simulated,
                                                  zerosim, kind):
    paths = files_of_each_kind(tmp_path, rows, simulated)[kind]
    page = tmp_path / f"{kind}.html"
    result = zerosim("plot", *paths, "--kind", kind, "-o", page)
    assert result.code == 0, result.stderr
    seen = render(browser, page, tmp_path)
    assert seen["errors"] == []
    assert seen["svgs"] >= 2  # plotly's main and info layers
    assert seen["traces"] == [len(figures.build_figure(kind, [str(p) for p in paths]).data)]


@pytest.mark.parametrize("kind", ["memory", "tradeoff", "calibration"])
def test_log_axes_read_as_their_values(browser, tmp_path, rows, simulated, zerosim, kind):
    """Every label plotly draws on a log axis is a number, larger than the one before it: a
    "3" after "20" (plotly's own minor label for 30) fails. The rows peak from 2.5 to 16 GiB."""
    paths = files_of_each_kind(tmp_path, rows, simulated)[kind]
    page = tmp_path / f"{kind}.html"
    assert zerosim("plot", *paths, "--kind", kind, "-o", page).code == 0
    ticks = render(browser, page, tmp_path)["ticks"]
    layout = figures.build_figure(kind, [str(p) for p in paths]).layout
    log_axes = [name for name in dir(layout) if re.fullmatch(r"[xy]axis\d*", name)
                and layout[name].type == "log"]
    assert log_axes
    for axis in log_axes:
        drawn = ticks[f"{axis[0]}{axis[5:]}tick"]  # xaxis2 -> x2tick
        values = [float(text.replace("\u2212", "-")) for text in drawn]  # plotly's minus sign
        assert len(values) >= 2 and values == sorted(set(values)), (axis, drawn)


def test_the_probe_reports_a_script_that_throws(browser, tmp_path):
    page = tmp_path / "broken.html"
    page.write_text("<!doctype html><html><head><meta charset='utf-8'></head><body>"
                    "<script>throw new Error('deliberately broken figure');</script>"
                    "<script>console.error('and a console error');</script></body></html>")
    seen = render(browser, page, tmp_path)
    assert len(seen["errors"]) == 2
    assert "deliberately broken figure" in seen["errors"][0]
    assert seen["errors"][1] == "and a console error"
    assert seen["svgs"] == 0 and seen["traces"] == []


def test_png_through_kaleido(browser, tmp_path, rows, zerosim):
    if not figures.kaleido_ready():
        pytest.skip("kaleido >= 1 is not installed (pip install 'zerosim[png]')")
    out = tmp_path / "memory.png"
    result = zerosim("plot", write_sweep(tmp_path / "s.csv", rows), "--kind", "memory", "-o", out)
    assert result.code == 0, result.stderr
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (1200, 700)  # IHDR: the size figures.write_figure asks for
