"""mwrun report on run folders made by hand: a picture and a summary, or a clear
message, never a traceback."""

import json
import os
import struct
import subprocess
import sys
import time

from click.testing import CliRunner

from mwrun.cli import report as drawing
from mwrun.cli.commands import main
from mwrun.records import build
from tests.unit.test_history import record_drill


def run_folder(home, run_id="r"):
    path = home / "runs" / run_id
    path.mkdir(parents=True)
    (path / "state.json").write_text(json.dumps({
        "run_id": run_id, "name": "star", "state": "finished", "supervisor_pid": None,
        "started_at": 1.0, "exit_code": 0, "processes": [], "worlds": []}))
    return path


def report(home, *args):
    return CliRunner().invoke(main, ["report", *args], env={"MWRUN_HOME": str(home)})


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_a_drill_becomes_a_picture_and_a_summary(tmp_path):
    record_drill(run_folder(tmp_path))
    result = report(tmp_path, "r")
    assert result.exit_code == 0, result.output
    assert "world1: 1 break(s), down 1.51 s in all" in result.output
    picture = tmp_path / "runs" / "r" / "report.png"
    assert f"picture: {picture}" in result.output
    width, height = png_size(picture)
    assert 600 <= width <= 1200 and 300 <= height <= 1200
    svg = tmp_path / "drill.svg"
    assert report(tmp_path, "-o", str(svg)).exit_code == 0  # the newest run, as SVG
    assert svg.read_text().lstrip().startswith("<?xml")


def test_a_run_with_no_traffic_says_so(tmp_path):
    path = run_folder(tmp_path)
    (path / "history.jsonl").write_text(
        '{"t": 1.0, "event": "start", "run_id": "r", "name": "star",'
        ' "worlds": {"default": ["rank-0", "rank-1"]}}\n'
        '{"t": 1.1, "event": "spawn", "process": "rank-0", "pid": 5, "restarts": 0}\n'
        '{"t": 9.0, "event": "end", "state": "finished"}\n')
    result = report(tmp_path, "r", "-o", str(tmp_path / "r.png"))
    assert result.exit_code == 0, result.output
    assert "note: no traffic was recorded: no member made a call through the mwrun" \
        " library" in result.output
    png_size(tmp_path / "r.png")


def test_a_truncated_history_and_bad_requests_get_clear_messages(tmp_path):
    path = run_folder(tmp_path)
    (path / "history.jsonl").write_text('{"t": 1.0, "event": "sta')
    result = report(tmp_path, "r")
    assert result.exit_code == 1
    assert result.output == "Error: the history of run r has no start record (it was cut" \
        " short or is not mwrun's); nothing to draw\n"
    (path / "history.jsonl").unlink()
    assert "run r has no history" in report(tmp_path, "r").output
    assert report(tmp_path, "nope").output.startswith("Error: no run 'nope'")
    record_drill(path)
    bad = report(tmp_path, "r", "-o", str(tmp_path / "r.gif"))
    assert bad.exit_code == 2 and "the picture can be .png, .svg, .pdf, not .gif" in bad.output


def test_without_matplotlib_report_says_how_to_get_it(tmp_path):
    record_drill(run_folder(tmp_path))
    code = ("import sys\nsys.modules['matplotlib'] = None\n"
            "from mwrun.cli import main\nmain(['report', 'r'])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"MWRUN_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert out.returncode == 1
    assert out.stderr == "Error: mwrun report draws with matplotlib, which is not installed" \
        " here; install it with: pip install 'mwrun[report]'\n"


def test_scale_operations_are_marked_and_summed_up(tmp_path):
    path = run_folder(tmp_path)
    start = {"t": 1.0, "event": "start", "run_id": "r", "name": "serve",
             "worlds": {"pair-0": ["frontend", "worker-0"]}}
    phases = {"requested": 10.0, "started": 10.05, "formed": 10.1, "told": 10.12,
              "first_call": 10.2}
    drained = {"requested": 20.0, "draining": 20.001, "closed": 20.01, "exited": 20.03}
    records = [start,
               {"t": 10.1, "event": "add", "world": "pair-1", "members": ["frontend",
                                                                         "worker-1"]},
               {"t": 10.1, "event": "form", "world": "pair-1", "generation": 0},
               {"t": 10.3, "event": "scale", "op": "op-1", "process": "worker-1",
                "change": "add", "outcome": "done", "error": None, "phases": phases},
               {"t": 20.0, "event": "drain", "world": "pair-1", "generation": 0,
                "seconds": 30},
               {"t": 20.01, "event": "remove", "world": "pair-1", "reason": "drained"},
               {"t": 20.03, "event": "scale", "op": "op-2", "process": "worker-1",
                "change": "remove", "outcome": "done", "error": None, "phases": drained},
               {"t": 21.0, "event": "end", "state": "finished"}]
    (path / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    result = report(tmp_path, "r")
    assert result.exit_code == 0, result.output
    assert "pair-1" in result.output  # a world made while the run ran has its lane
    assert "scale: 1 replica(s) added, requested -> told median 120 ms, max 120 ms" \
        in result.output
    assert "scale: 1 replica(s) retired, requested -> exited median 30 ms" in result.output
    assert "op-1 worker-1 add: started +50 ms, formed +100 ms, told +120 ms," \
        " first_call +200 ms" in result.output


def test_each_members_wait_is_drawn_and_each_slow_member_said(tmp_path):
    path = run_folder(tmp_path)
    records = [{"t": 1.0, "event": "start", "run_id": "r", "name": "train",
                "worlds": {"w": ["m0", "m1", "m2"]}}]
    for i in range(30):  # m2 late from 10 s to 20 s: its peers wait, it does not
        late = 10 <= i < 20
        records.append({"t": 1.0 + i, "rates": {"w": [50.0, 800.0]},
                        "waits": {"w": {"m0": 0.021 if late else 0.001,
                                        "m1": 0.02 if late else 0.001,
                                        "m2": 0.0005 if late else 0.001,
                                        "ghost": "x"}}})
    records += [{"t": 14.0, "event": "slow", "world": "w", "generation": 0, "member": "m2",
                 "lag_s": 0.0195, "collectives": 200},
                {"t": 27.0, "event": "slow", "world": "w", "generation": 0, "member": None},
                {"t": 31.0, "event": "end", "state": "finished"}]
    (path / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    tl = build(records, [], "r")
    assert sorted(tl.waits["w"]) == ["m0", "m1", "m2"]  # a value of the wrong kind: left out
    assert tl.waits["w"]["m2"][10] == (11.0, 0.0005)
    result = report(tmp_path, "r", "-o", str(tmp_path / "r.png"))
    assert result.exit_code == 0, result.output
    assert "slow members named: 1" in result.output
    assert "  w: m2 from 13.0 s to 26.0 s (its peers waited 20 ms more per collective)" \
        in result.output
    png_size(tmp_path / "r.png")


WRONG_SHAPES = [
    {"t": 3.0, "event": "spawn", "process": "worker-0", "restarts": "many"},
    {"t": 3.1, "event": "spawn"},
    {"t": 3.2, "event": "break", "world": ["world1"], "generation": 0},
    {"t": 3.3, "rates": [1, 2]},
    {"t": 3.4, "calls": {"world1": "many"}},
    {"t": 3.5, "event": "end"},
    {"t": 3.6, "event": "fault", "world": "world1", "phases": [1]},
    {"t": 3.7, "event": "form", "world": "world1", "generation": 1, "fault": "one"},
    {"t": 3.8, "event": "signal", "process": "worker-0", "signal": "SIGKILL",
     "why": "drill", "faults": ["world1"]},
    {"t": 3.9, "event": ["break"]},
    {"t": 0.5, "event": "start", "worlds": {"world1": 3}},
    [1, 2],
    "text",
]


def test_history_lines_of_the_wrong_shape_are_left_out_and_said(tmp_path):
    """Every line below is JSON but not a record as mwrun writes it: report reads the
    rest and says how many it left out, never a traceback."""
    path = run_folder(tmp_path)
    good = [{"t": 1.0, "event": "start", "run_id": "r", "name": "star",
             "worlds": {"world1": ["leader", "worker-0"]}},
            {"t": 2.0, "event": "form", "world": "world1", "generation": 0},
            {"t": 5.0, "event": "end", "state": "finished"}]
    for bad in WRONG_SHAPES:
        lines = [good[0], good[1], bad, good[2]]
        (path / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
        result = report(tmp_path, "r", "-o", str(tmp_path / "r.png"))
        assert result.exit_code == 0, (bad, result.output)
        assert "note: 1 line(s) of the history not shaped as mwrun writes them were left" \
            " out" in result.output, bad


def test_a_drill_record_of_the_wrong_shape_is_a_note(tmp_path):
    path = run_folder(tmp_path)
    lines = [{"t": 1.0, "event": "start", "run_id": "r", "name": "star",
              "worlds": {"world1": ["leader", "worker-0"]}},
             {"t": 2.0, "event": "drill", "started": 1.0, "ended": 2.0, "skipped": [],
              "not_recovered": [], "kept_faulted": None, "kept_others": None,
              "worlds": {"world1": {"faults": 1, "downtime_median": 1.0, "downtime_max": 1.0,
                                    "kept": None, "pace": None, "fault_free_pace": None,
                                    "list": [{"sent": 1e300, "process": "w",
                                              "recovered": True, "downtime": 1.0,
                                              "phases": None}]}}}]
    (path / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    result = report(tmp_path, "r", "-o", str(tmp_path / "r.png"))
    assert result.exit_code == 0, result.output
    assert "note: a drill record could not be read" in result.output


def close_faults(n=4, every=0.4, span=60.0):
    """world1 killed ``n`` times ``every`` seconds apart from 30 s (each down 0.2 s),
    in a run of ``span`` seconds: labels side by side would run into each other."""
    worlds = {"world1": ["leader", "worker-0"]}
    records = [{"t": 0.0, "event": "start", "run_id": "r", "name": "star", "worlds": worlds},
               {"t": 0.0, "event": "form", "world": "world1", "generation": 0}]
    for i in range(n):
        t, one = 30.0 + i * every, {"world1": i + 1}
        records += [
            {"t": t, "event": "signal", "process": "worker-0", "signal": "SIGKILL",
             "why": "drill", "faults": one},
            {"t": t + 0.01, "event": "break", "world": "world1", "generation": i,
             "reason": "killed", "fault": i + 1},
            {"t": t + 0.1, "event": "spawn", "process": "worker-0", "restarts": i + 1,
             "faults": one},
            {"t": t + 0.19, "event": "form", "world": "world1", "generation": i + 1,
             "fault": i + 1},
            {"t": t + 0.21, "event": "fault", "id": i + 1, "world": "world1",
             "generation": i, "process": "worker-0", "signal": "SIGKILL", "cause": "killed",
             "breaks": 1, "phases": {"t_fault": t, "exit_seen": t + 0.005,
                                     "survivors_told": t + 0.01, "restarted": t + 0.1,
                                     "reformed": t + 0.19, "first_call": t + 0.2}}]
    records += [{"t": float(t), "calls": {"world1": [10 * t, float(t)]}}
                for t in range(1, int(span))]
    records.append({"t": span, "event": "end", "state": "finished"})
    return records


def lane_labels(records) -> tuple[list, str]:
    """The downtime labels drawn over world1's lane, as laid out in the file, and
    the lane's name; checked that no two overlap."""
    plt = drawing.pyplot()
    fig = drawing.figure(plt, build(records, [], "r"))
    try:
        renderer = fig.canvas.get_renderer()
        labels = [t for t in fig.axes[0].texts if t.get_text().startswith("down ")]
        boxes = [t.get_window_extent(renderer) for t in labels]
        assert not [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:]
                    if a.overlaps(b)]
        assert all(0.0 < t.get_position()[1] <= 1.0 for t in labels)  # over the lane
        return labels, fig.axes[0].get_ylabel()
    finally:
        plt.close(fig)


def test_close_faults_downtime_labels_never_overlap():
    labels, lane = lane_labels(close_faults(n=3))
    assert len(labels) == 3 and lane == "world1"
    labels, lane = lane_labels(close_faults(n=8))  # too many rows: the summary lists them
    assert labels == [] and lane == "world1\n(8 faults:\nsee below)"


def test_label_rows_take_the_lowest_row_that_is_clear():
    assert drawing.rows([(0, 10), (5, 15), (8, 20), (16, 30), (40, 50)], gap=1.0) == \
        [0, 1, 2, 0, 0]


def test_the_header_says_live_or_cut_short_and_counts_as_the_finish_line(tmp_path):
    path = run_folder(tmp_path)
    records = close_faults(n=2, every=5.0)[:-1]  # no end record
    (path / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    state = json.loads((path / "state.json").read_text())
    header = "run r (star): 59.0 s of history, {}; 2 fault(s), 2 restart(s), 2 world break(s)"
    (path / "state.json").write_text(json.dumps({**state, "state": "running"}))
    result = report(tmp_path, "r", "-o", str(tmp_path / "r.png"))
    assert header.format("cut short (its head died without ending it)") in result.output
    (path / "state.json").write_text(json.dumps({  # this process, as its head
        **state, "state": "running", "supervisor_pid": os.getpid(), "control": "sock",
        "started_at": time.time()}))
    result = report(tmp_path, "r", "-o", str(tmp_path / "r.png"))
    assert header.format("live") in result.output, result.output


def test_a_picture_with_no_folder_says_where_it_was_written(tmp_path, monkeypatch):
    record_drill(run_folder(tmp_path))
    monkeypatch.chdir(tmp_path)
    result = report(tmp_path, "r", "-o", "r.png")
    assert result.exit_code == 0, result.output
    assert f"picture: {tmp_path / 'r.png'}\n" in result.output
