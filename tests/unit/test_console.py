import io

from mwrun.head import console
from mwrun.head.console import Printer
from mwrun.host import lines
from mwrun.host.lines import LineBuffer


def test_line_buffer_splits_and_keeps_partial_lines():
    lines = LineBuffer()
    assert lines.feed(b"one\ntw") == ["one"]
    assert lines.feed(b"o\r\nthree") == ["two"]
    assert lines.flush() == ["three"]
    assert lines.feed(b"\xff\n") == ["\ufffd"]


def test_a_line_without_end_is_cut_rather_than_held(monkeypatch):
    monkeypatch.setattr(lines, "LONGEST_LINE", 10)
    assert LineBuffer().feed(b"x" * 25) == ["x" * 25]


def test_output_is_prefixed_aligned_and_logged_with_rotation(tmp_path, monkeypatch):
    (tmp_path / "logs").mkdir()
    monkeypatch.setattr(console, "LOG_BYTES", 200)
    out = io.StringIO()
    shown = Printer(["leader", "w"], out, colour=False, run_dir=tmp_path)
    for i in range(30):
        shown.line("w", f"line {i:02d} " + "." * 20)
    shown.event("w exited normally")
    shown.close()
    assert out.getvalue().splitlines()[0] == "w      | line 00 ...................."
    assert out.getvalue().splitlines()[-1] == "mwrun  | w exited normally"
    logs = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert logs == ["leader.log", "w.log", "w.log.1", "w.log.2", "w.log.3"]
    assert (tmp_path / "logs" / "w.log").stat().st_size <= 200
    assert "line 29" in (tmp_path / "logs" / "w.log").read_text()
    assert "w exited normally" in (tmp_path / "events.log").read_text()
