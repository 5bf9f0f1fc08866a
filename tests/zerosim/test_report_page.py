"""`zerosim report`: one self-contained page whose numbers are the commands' `--json`, checked
in the file and, where a Chromium is on PATH, in the page a headless browser rendered; the token
budget's arithmetic by hand; bad input one line."""

import json
import re
from html.parser import HTMLParser

import pytest

from tests.conftest import SCENARIOS
from tests.zerosim.test_plots_browser import browser, render  # noqa: F401 (the fixture)
from zerosim.errors import InputError
from zerosim.tradeoffs import budget
from zerosim.tradeoffs.page import STEP_CELLS, shown

LLAMA = str(SCENARIOS / "llama2_7b_64gpu.toml")  # 8 x 8 A100-80GB, micro-batch 1 x 4096, no GA


class Cells(HTMLParser):
    """Every table cell with a data-path: (path, value as JSON, text shown); the embedded data."""

    def __init__(self):
        super().__init__()
        self.cells, self.data, self._cell, self._script = [], None, None, False
        self.fetches = []  # what a browser would fetch: <script src>, <link href>, <img src>

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.fetches += [attrs[k] for k in ("src", "href") if attrs.get(k)
                         and tag in ("script", "link", "img", "iframe")]
        if tag == "td" and "data-path" in attrs:
            self._cell = [attrs["data-path"], json.loads(attrs["data-value"]), ""]
        self._script = tag == "script" and attrs.get("id") == "zerosim-data"

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[2] += data
        if self._script:
            self.data = json.loads(data)

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self.cells.append(tuple(self._cell))
            self._cell = None
        self._script = False


def parsed(text):
    cells = Cells()
    cells.feed(text)
    return cells


def at(data, path):
    for part in path.split("."):
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


@pytest.fixture(scope="module")
def llama_report(tmp_path_factory):
    from tests.conftest import run_zerosim

    out = tmp_path_factory.mktemp("report") / "llama.html"
    result = run_zerosim("report", LLAMA, "-o", str(out), "--tokens", "2T",
                         "--price-per-gpu-hour", "2.5")
    assert result.code == 0, result.stderr
    return out, result


def test_the_page_holds_the_commands_json(llama_report, zerosim):
    out, _ = llama_report
    page = parsed(out.read_text())
    memory = json.loads(zerosim("memory", LLAMA, "--json").stdout)
    steps = json.loads(zerosim("simulate", LLAMA, "--json").stdout)
    plan = json.loads(zerosim("plan", LLAMA, "--json").stdout)
    assert page.data["memory"] == memory
    assert page.data["simulate"] == steps
    assert page.data["plan"] == plan


def test_every_cell_shows_the_json_value_it_names(llama_report, zerosim):
    out, _ = llama_report
    page = parsed(out.read_text())
    steps = json.loads(zerosim("simulate", LLAMA, "--json").stdout)
    sources = {"memory": page.data["memory"]["stages"], "simulate": steps,
               "budget": page.data["budget"]}
    paths = [path for path, _, _ in page.cells]
    assert len(paths) == len(set(paths))
    assert {p.split(".")[0] for p in paths} == set(sources)
    assert sum(p.startswith("simulate.") for p in paths) == 4 * 8  # four stages x eight figures
    for path, value, text in page.cells:
        source, rest = path.split(".", 1)
        assert at(sources[source], rest) == value, path
        assert text == shown(path.rsplit(".", 1)[1], value), path
    zero3_step = next(text for path, _, text in page.cells if path == "simulate.3.step_time_s")
    assert zero3_step == f"{steps[3]['step_time_s']:.3f}"


def test_time_to_train_by_hand(llama_report, zerosim):
    """2T tokens: each step trains 64 ranks x 1 x 4096 tokens (the scenario's micro-batch and
    sequence, no accumulation) in its simulated step time."""
    out, _ = llama_report
    page = parsed(out.read_text())
    steps = json.loads(zerosim("simulate", LLAMA, "--json").stdout)
    for row, step in zip(page.data["budget"], steps):
        seconds = 2 * 10**12 / (64 * 1 * 4096) * step["step_time_s"]
        assert row["seconds"] == pytest.approx(seconds, rel=1e-12)
        assert row["gpu_hours"] == pytest.approx(seconds * 64 / 3600, rel=1e-12)
        assert row["cost"] == pytest.approx(seconds * 64 / 3600 * 2.5, rel=1e-12)


def test_the_page_says_what_a_shared_page_needs(llama_report):
    out, result = llama_report
    text = out.read_text()
    data = parsed(text).data
    from zerosim import __version__

    assert f"zerosim {__version__}" in text
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", data["generated"])
    assert "<title>Llama-2-7B on 64 x A100-80GB: zerosim report</title>" in text
    assert data["notes"] and all(n in text for n in map(__import__("html").escape, data["notes"]))
    assert result.stderr.count("zerosim: note:") == len(data["notes"])
    assert data["inputs"]["cluster"]["gpu"] == "A100-80GB"
    assert parsed(text).fetches == []  # opens offline: plotly.js is inline
    assert [row["world_size"] for row in data["sweep"][::4]] == [8, 16, 32, 64, 128]


def test_a_reproducible_date(tmp_path, zerosim, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1764288000")  # 2025-11-28 00:00 UTC
    out = tmp_path / "r.html"
    assert zerosim("report", str(SCENARIOS / "tiny_gpt_4rank_cpu.toml"), "-o", str(out)).code == 0
    assert parsed(out.read_text()).data["generated"] == "2025-11-28 00:00 UTC"


@pytest.mark.parametrize("text, tokens", [("2T", 2 * 10**12), ("300B", 300 * 10**9),
                                          ("15e9", 15 * 10**9), ("1.5G", 1_500_000_000),
                                          ("4_000_000", 4_000_000), ("7k", 7000)])
def test_token_budgets_read_as_people_write_them(text, tokens):
    assert budget.parse_tokens(text) == tokens


@pytest.mark.parametrize("text", ["2X", "", "T", "0", "1e19", "0.5", "1.5", "-3B", "nan"])
def test_token_budgets_refused(text):
    with pytest.raises(InputError, match="--tokens"):
        budget.parse_tokens(text)


def test_budget_row_by_hand():
    row = budget.budget_row({"stage": 1, "name": "ZeRO-1", "tokens_per_s_per_gpu": 1000.0},
                            world_size=8, tokens=8 * 10**6 * 3600, price_per_gpu_hour=2.0)
    assert row["tokens_per_s"] == 8000.0
    assert row["seconds"] == 3600 * 1000  # 2.88e10 tokens at 8000 a second
    assert row["gpu_hours"] == 8000 and row["cost"] == 16000
    assert budget.duration_text(row["seconds"]) == "41.67 days"


@pytest.mark.parametrize("argv, words", [
    (["-o", "{tmp}/r.txt"], "a report is an .html page"),
    (["-o", "{tmp}/r.html", "--tokens", "lots"], "--tokens"),
    (["-o", "{tmp}/r.html", "--price-per-gpu-hour", "2"], "give --tokens too"),
    (["-o", "{tmp}/r.html", "--tokens", "1T", "--price-per-gpu-hour", "-1"],
     "--price-per-gpu-hour"),
    (["-o", "{tmp}/r.html", "--gpus", "12"], "--gpus 12"),
    (["-o", "{tmp}/r.html", "--gpus", "8,x"], "--gpus"),
    (["-o", "{tmp}/no/such/dir/r.html"], "-o"),
])
def test_bad_input_is_one_line(tmp_path, zerosim, argv, words):
    result = zerosim("report", LLAMA, *[a.format(tmp=tmp_path) for a in argv])
    assert result.code == 2
    assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.glob("*.html"))


def test_a_page_renders_in_chromium_with_every_figure(browser, llama_report,  # noqa: F811
                                                       tmp_path):
    out, _ = llama_report
    seen = render(browser, out, tmp_path)
    assert seen["errors"] == []
    data = parsed(out.read_text()).data
    assert len(seen["traces"]) == 3  # timeline, memory against GPUs, memory against comm
    assert all(count > 0 for count in seen["traces"])
    assert data["simulate"]


def test_the_rendered_cells_equal_the_json(browser, llama_report, tmp_path,  # noqa: F811
                                           zerosim):
    """The DOM Chromium built (not the file's text) holds the cells with the --json values."""
    import subprocess

    out, _ = llama_report
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                           f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                           out.as_uri()], capture_output=True, text=True, timeout=120)
    page = parsed(done.stdout)
    steps = json.loads(zerosim("simulate", LLAMA, "--json").stdout)
    rendered = {path: (value, text) for path, value, text in page.cells}
    for stage, step in enumerate(steps):
        for key in ("step_time_s", "tokens_per_s_per_gpu", "mfu", "peak_bytes"):
            value, text = rendered[f"simulate.{stage}.{key}"]
            assert value == step[key] and text == shown(key, step[key])


def test_the_cells_read_as_the_simulate_table_prints_them(llama_report, zerosim):
    """The step table's text, column by column, is what `zerosim simulate` prints for it (its
    text table: an oracle apart from the page's formatter)."""
    out, _ = llama_report
    page = {path: text for path, _, text in parsed(out.read_text()).cells}
    lines = zerosim("simulate", LLAMA).stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("stage "))
    keys = dict(STEP_CELLS)
    for stage in range(4):
        words = lines[header + 1 + stage].split()
        printed = {"step s": words[2], "compute s": words[3], "exposed comm s": words[4],
                   "comm GB/rank": words[5], "peak GB": words[9], "device GB": words[10],
                   "tokens/s/GPU": words[12], "MFU": words[13]}
        for title in printed:
            assert page[f"simulate.{stage}.{keys[title]}"] == printed[title], (stage, title)


def test_the_timeline_and_star_are_the_scenarios_own_stage(tmp_path, zerosim):
    out = tmp_path / "r.html"
    assert zerosim("report", LLAMA, "--set", "training.zero_stage=1", "-o", str(out)).code == 0
    text = out.read_text()
    assert parsed(text).data["timeline_stage"] == 1
    assert "<td>1 ZeRO-1 *</td>" in text and "<td>3 ZeRO-3 *</td>" not in text


def test_the_world_sizes_are_ones_the_scenario_allows():
    """Shard groups of 16 (hybrid sharding): an eighth of 64 GPUs, 8, is no multiple of 16, so
    the sizes start at 16; 1/8 to 2x of 64 otherwise, by hand."""
    from zerosim.scenario.load import load_scenario
    from zerosim.tradeoffs.page import report_gpus

    assert report_gpus(load_scenario(LLAMA)) == [8, 16, 32, 64, 128]
    hybrid = load_scenario(LLAMA, ["parallelism.shard_group=16", "training.zero_stage=3"])
    assert report_gpus(hybrid) == [16, 32, 64, 128]
    with pytest.raises(InputError, match="--gpus 24"):
        report_gpus(hybrid, (16, 24))


def test_a_companion_files_notes_are_on_the_page(tmp_path, zerosim):
    out = tmp_path / "r.html"
    result = zerosim("report", LLAMA, "--deepspeed",
                     str(SCENARIOS / "deepspeed" / "zero2_cpu_offload.json"), "-o", str(out))
    assert result.code == 0, result.stderr
    notes = parsed(out.read_text()).data["notes"]
    from_stderr = [line.removeprefix("zerosim: note: ") for line in result.stderr.splitlines()
                   if line.startswith("zerosim: note: ")]
    assert notes == from_stderr and notes[0].startswith(
        f"from {SCENARIOS / 'deepspeed' / 'zero2_cpu_offload.json'}")


def test_a_hostile_model_name_stays_text_and_the_data_stays_json(tmp_path, zerosim):
    """'<!--<script>' would make a browser's parser skip the data's real end; '</script>' would
    close it early (review): the data holds no <, > or & at all, and the name comes back whole."""
    name = "tiny <!--<script> </script> & GPT"
    scenario = tmp_path / "hostile.toml"
    scenario.write_text((SCENARIOS / "tiny_gpt_4rank_cpu.toml").read_text().replace(
        'name = "tiny GPT"', f'name = "{name}"'))
    out = tmp_path / "r.html"
    assert zerosim("report", str(scenario), "-o", str(out)).code == 0
    text = out.read_text()
    data_text = text.split('<script type="application/json" id="zerosim-data">')[1]
    data_text = data_text[:data_text.index("</script>")]
    assert not {"<", ">", "&"} & set(data_text)
    assert json.loads(data_text)["memory"]["model"] == name
    assert "<script> </script>" not in text.split("<body>")[1].split("zerosim-data")[0]


def test_a_bare_model_without_a_name_is_titled_by_its_size_and_refuses_a_budget(tmp_path,
                                                                                  zerosim):
    """No name: the title says its size (7.5B parameters); no sequence: no step to price, so
    --tokens is refused in one line rather than dropped (review)."""
    text = (SCENARIOS / "zero_paper_7b5_64gpu.toml").read_text()
    scenario = tmp_path / "bare.toml"
    scenario.write_text(text.replace('name = "ZeRO paper 7.5B (bare Ψ)"\n', "").replace(
        "seq_len = 1024", "# no sequence"))
    out = tmp_path / "r.html"
    assert zerosim("report", str(scenario), "-o", str(out)).code == 0, "memory alone"
    assert "<title>7.5B parameters on 64 x V100-32GB: zerosim report</title>" in out.read_text()
    assert parsed(out.read_text()).data["simulate"] == []
    result = zerosim("report", str(scenario), "-o", str(tmp_path / "b.html"), "--tokens", "2T")
    assert result.code == 2 and "training.seq_len" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("epoch", ["99999999999999999", "٣", "-1", "1e9"])
def test_a_bad_source_date_epoch_is_one_line(tmp_path, zerosim, monkeypatch, epoch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", epoch)
    result = zerosim("report", str(SCENARIOS / "tiny_gpt_4rank_cpu.toml"), "-o",
                     str(tmp_path / "r.html"))
    assert result.code == 2 and "SOURCE_DATE_EPOCH" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_cost_past_what_a_number_holds_is_refused(tmp_path, zerosim):
    result = zerosim("report", LLAMA, "-o", str(tmp_path / "r.html"), "--tokens", "1e18",
                     "--price-per-gpu-hour", "1e308")
    assert result.code == 2 and "a smaller price" in result.stderr
    assert not (tmp_path / "r.html").exists()


def test_small_budgets_keep_their_figures():
    assert shown("gpu_hours", 0.0176) == "0.0176" and shown("cost", 0.053) == "0.053"
    assert shown("cost", 319108.4) == "319,108"


def test_a_timeline_too_large_for_a_page_is_left_out_and_said():
    from zerosim.tradeoffs import page

    small = {"stepEvents": [{}] * 10}
    large = {"stepEvents": [{}] * 60_000, "pipelineEvents": [{}] * 60_000}
    assert page._left_out({"trace": small}) == ""
    assert "120,000 events" in page._left_out({"trace": large})
    assert page.timeline_events(large) > page.MAX_TIMELINE_EVENTS >= page.timeline_events(small)


@pytest.mark.parametrize("gpus", [[8.0], ["8"], [0], [True]])
def test_the_api_checks_its_world_sizes(gpus):
    import zerosim

    with pytest.raises(InputError, match="gpus="):
        zerosim.report_page(zerosim.load(LLAMA), gpus=gpus)
