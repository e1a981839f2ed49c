import re

from mwrun.cli.statusview import render
from mwrun.head.observe import rundir
from mwrun.terminal import paint, table, width

STRIP = re.compile(r"\033\[[0-9;]*m")

DOC = {"run_id": "star-1", "name": "star", "state": "running", "supervisor_pid": 42,
       "started_at": 100.0,
       "processes": [{"name": "leader", "host": "localhost", "pid": 50, "state": "running",
                      "exit_code": None, "restarts": 0, "worlds": {"world1": 0},
                      "started_at": 100.0, "cpu_percent": 1.0, "rss_bytes": 1024},
                     {"name": "worker-0", "host": "localhost", "pid": None,
                      "state": "restarting", "exit_code": -9, "restarts": 1,
                      "worlds": {"world1": 1}, "started_at": None}],
       "worlds": [{"name": "world1", "state": "broken", "generation": 1, "breaks": 1,
                   "backend": "gloo", "port": 29501, "members": ["leader", "worker-0"]}]}


def test_table_pads_by_visible_width_when_cells_are_painted():
    rows = [[paint("running", 32, True), "x"], ["hung", "y"]]
    lines = [STRIP.sub("", line) for line in table(["STATE", "NEXT"], rows).splitlines()]
    assert [line.index(ch) for line, ch in zip(lines, "Nxy", strict=True)] == [9, 9, 9]
    assert width(paint("running", 32, True)) == 7


def test_status_columns_line_up_with_colours_on():
    plain = render(DOC, True, colour=False, now=110.0)
    painted = render(DOC, True, colour=True, now=110.0)
    assert "\033[" in painted
    assert STRIP.sub("", painted) == plain


def test_last_events_are_the_newest_in_the_order_they_happened():
    events = [f"10:00:0{i} event {i}" for i in range(6)]
    text = render(DOC, False, now=110.0, events=events)
    shown = text.split("last events:\n")[1].splitlines()
    assert shown == [f"  {line}" for line in events]


def test_recent_events_reads_the_tail_of_the_events_log(tmp_path, monkeypatch):
    monkeypatch.setenv("MWRUN_HOME", str(tmp_path))
    folder = tmp_path / "runs" / "r"
    folder.mkdir(parents=True)
    (folder / "events.log").write_text("".join(f"10:{i // 60:02d}:{i % 60:02d} e{i}\n"
                                               for i in range(3000)))
    assert rundir.recent_events("r", 3) == ["10:49:57 e2997", "10:49:58 e2998",
                                             "10:49:59 e2999"]
    assert rundir.recent_events("missing") == []


def test_counts_are_said_in_the_singular_or_plural():
    from mwrun.terminal import count
    assert [count(n, "world") for n in (0, 1, 2)] == ["0 worlds", "1 world", "2 worlds"]
    assert count(1, "process", "processes") == "1 process"
    assert count(3, "process", "processes") == "3 processes"
