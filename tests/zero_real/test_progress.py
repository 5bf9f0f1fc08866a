"""Progress lines on the launcher's stderr (zero_real/run/progress.py): what they say, item by
item, and which of them a log gets. Written as the ranks write them, followed as the launcher
follows them; no timing is asserted (the interval between lines is a parameter, 0 or never here).
The lines of real launches are checked in test_cli.py (run) and test_calibrate.py (calibrate)."""

import io

import pytest

pytest.importorskip("torch")

from zero_real.run.progress import Progress, ProgressPrinter  # noqa: E402


class Terminal(io.StringIO):
    def isatty(self):
        return True


def _measure(path: str) -> None:
    """Two sections as calibration/bench.py writes them, and a rank other than 0 that stays
    quiet."""
    progress = Progress(path, rank=0)
    progress.begin("collectives", 2)
    progress.tick("native all_reduce 1024 B")
    progress.tick("native all_reduce 2048 B")
    Progress(path, rank=1).begin("memory", 8)
    progress.begin("memory", 2)
    progress.tick("stage 0 micro-batch 1")
    progress.tick("stage 1 micro-batch 1")


def _lines(tmp_path, stream, every_s):
    path = tmp_path / "progress"
    path.write_text("")
    with ProgressPrinter(str(path), "calibrate n=2", stream, "starting 2 process(es)",
                         every_s=every_s):
        _measure(str(path))
    return stream.getvalue()


def test_with_no_interval_a_log_gets_every_item_and_what_it_was(tmp_path):
    lines = [line.rsplit(" in ", 1)[0] for line in _lines(tmp_path, io.StringIO(), 0).splitlines()]
    assert lines == ["calibrate n=2: starting 2 process(es)",
                     "calibrate n=2: collectives 0/2",
                     "calibrate n=2: collectives 1/2 (native all_reduce 1024 B)",
                     "calibrate n=2: collectives 2/2",
                     "calibrate n=2: memory 0/2",
                     "calibrate n=2: memory 1/2 (stage 0 micro-batch 1)",
                     "calibrate n=2: memory 2/2"]


def test_with_a_long_interval_a_log_gets_the_start_and_each_finished_section(tmp_path):
    text = _lines(tmp_path, io.StringIO(), 1e9)
    lines = [line.rsplit(" in ", 1) for line in text.splitlines()]
    assert [line[0] for line in lines] == ["calibrate n=2: starting 2 process(es)",
                                           "calibrate n=2: collectives 2/2",
                                           "calibrate n=2: memory 2/2"]
    assert all(len(line) == 2 and line[1].endswith(" s") for line in lines[1:])


def test_a_terminal_gets_every_update_on_one_line_rewritten(tmp_path):
    text = _lines(tmp_path, Terminal(), 1e9)
    assert text.endswith("\n") and text.count("\n") == 1
    shown = [s.rstrip() for s in text[:-1].split("\r")]
    assert shown == ["", "calibrate n=2: starting 2 process(es)",
                     "calibrate n=2: collectives 0/2",
                     "calibrate n=2: collectives 1/2 (native all_reduce 1024 B)",
                     "calibrate n=2: collectives 2/2 (native all_reduce 2048 B)",
                     "calibrate n=2: memory 0/2",
                     "calibrate n=2: memory 1/2 (stage 0 micro-batch 1)",
                     "calibrate n=2: memory 2/2 (stage 1 micro-batch 1)"]
