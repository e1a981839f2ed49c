import io
import os
import threading

from mwrun.head.observe import console
from mwrun.head.observe.console import Printer
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


def test_control_sequences_are_stripped_but_colours_kept():
    assert console.clean("plain text\tok") == "plain text\tok"
    assert console.clean("\x1b]0;owned\x07title") == "title"  # no retitling
    assert console.clean("\x1b]8;;http://x\x1b\\link") == "link"
    assert console.clean("a\x1b[2Jb\x1b[10;1Hc\x1b[?25ld") == "abcd"  # no clearing, moving
    assert console.clean("\x1bc\x1b(Bx\x07\x08\x00\x7f") == "x"
    assert console.clean("\x9b2J\x9d0;t\x9cz") == "z"  # the 8-bit forms too
    assert console.clean("\x1b[31mred\x1b[0m") == "\x1b[31mred\x1b[0m\x1b[0m"
    assert console.clean("\x1b[1;32mgreen") == "\x1b[1;32mgreen\x1b[0m"  # reset at the end
    assert console.clean(" 10%\r 50%\r100%") == "100%"  # a progress bar's last state
    assert console.clean("done\r") == "done"


def test_the_console_is_cleaned_the_log_keeps_the_raw_line(tmp_path):
    (tmp_path / "logs").mkdir()
    out = io.StringIO()
    shown = Printer(["w"], out, colour=False, run_dir=tmp_path)
    shown.line("w", "\x1b]0;owned\x07hello")
    shown.close()
    assert out.getvalue() == "w     | hello\n"
    assert (tmp_path / "logs" / "w.log").read_text() == "\x1b]0;owned\x07hello\n"


def test_a_console_nobody_reads_never_blocks_and_counts_what_it_drops(tmp_path):
    (tmp_path / "logs").mkdir()
    read, write = os.pipe()
    stream = os.fdopen(write, "w")
    shown = Printer(["w"], stream, colour=False, run_dir=tmp_path)
    line = "x" * 100
    for _ in range(100):  # 10 MB: ten times what may wait, and the pipe is never read
        shown.lines("w", [line] * 1000)
    shown.close()  # returns although nobody reads
    got = []
    reader = threading.Thread(target=lambda: got.extend(iter(lambda: os.read(read, 1 << 16),
                                                             b"")))
    reader.start()  # now someone reads: what waited goes out, then a notice
    shown.terminal.close(10)
    shown.event("the end")
    shown.close()
    stream.close()
    reader.join(10)
    got = b"".join(got)
    text = got.decode()
    shown_lines = text.count(line)
    assert 0 < shown_lines < 100000
    notice = next(t for t in text.splitlines() if "not shown" in t)
    assert notice == (f"mwrun | {100000 - shown_lines} lines not shown: the console could"
                      " not keep up (the logs have them)")
    assert text.endswith("mwrun | the end\n")
    assert (tmp_path / "logs" / "w.log").read_text().count(line) == 100000
    os.close(read)
