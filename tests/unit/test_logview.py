"""``mwrun logs -f`` across rotations: every line once, in order."""

import logging

from mwrun.cli import logview
from mwrun.head.observe import console


def test_follow_prints_every_line_once_across_rotations(tmp_path, monkeypatch):
    monkeypatch.setattr(console, "LOG_BYTES", 300)
    monkeypatch.setattr(logview, "FOLLOW_EVERY", 0)
    path = tmp_path / "w.log"
    handler = console._file(path)
    written = []

    def write(count):
        for _ in range(count):
            written.append(f"line {len(written):04d} " + "." * 30)
            handler.emit(logging.makeLogRecord({"msg": written[-1]}))

    write(3)
    looks = iter(range(40))

    def live():  # between two looks, the process writes enough to rotate the file
        write(5)
        return next(looks) < 39

    out = []
    logview.show(path, True, live, lambda text, nl: out.append(text))
    handler.close()
    assert "".join(out).splitlines() == written
