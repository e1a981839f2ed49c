"""``mwrun drill --signal SLOW`` (cli/drillslow.py): each late member timed until the
head names it, against a scripted head and clock; no job."""

import pytest

from mwrun.cli.drillslow import CLEAR_WAIT, END, NAME_WAIT, POLL, SlowDrill
from mwrun.records import Shot


class Head:
    """Answers status with the verdicts of ``script`` (one per look: the member named,
    or None) and records the late orders; the clock moves by each sleep."""

    def __init__(self, *script):
        self.script = list(script)
        self.sent, self.now = [], 0.0

    def ask(self, request):
        if request["verb"] == "kill_world":
            self.sent.append((round(self.now, 3), request["world"], request["rank"],
                              request["delay"], request["for"]))
            return {"ok": True, "signalled": []}
        member = self.script.pop(0) if self.script else None
        return {"ok": True, "status": {"worlds": [
            {"name": "w", "slow": None if member is None else {"member": member}}]}}

    def sleep(self, seconds):
        self.now += seconds


def drill(head, shots, said):
    return SlowDrill(shots, 0.02, ask=head.ask, say=said.append, clock=lambda: head.now,
                     sleep=head.sleep)


def test_each_late_member_is_timed_until_named_then_let_go():
    # shot 1: quiet, then named on the third look; shot 2: still named from shot 1 for
    # one look (waited out), quiet, then named at once
    head = Head(None, None, None, "m2", "m2", None, "m1")
    said = []
    code = drill(head, [Shot(1.0, "w", "m2", 2), Shot(2.0, "w", "m1", 1)], said).run()
    assert code == 0
    first, second = said[0], said[1]
    assert first == f"drill: m2 of w 20 ms late: named after {2 * POLL:.1f}s\n"
    assert second.startswith("drill: m1 of w 20 ms late: named after 0.0s")
    late = [s for s in head.sent if s[4] == NAME_WAIT]
    assert [(w, r, d) for _, w, r, d, _ in late] == [("w", 2, 0.02), ("w", 1, 0.02)]
    assert [s[4] for s in head.sent] == [NAME_WAIT, END, NAME_WAIT, END]  # each let go
    assert said[-1] == "drill: 2 member(s) made 20 ms late; 2 named (median 0.2s, max 0.4s)\n" \
        .replace("0.2s", f"{POLL:.1f}s").replace("0.4s", f"{2 * POLL:.1f}s")


def test_a_member_never_named_is_missed_and_another_named_is_said():
    head = Head(None, *["m0"] * 1000)
    said = []
    assert drill(head, [Shot(0.0, "w", "m2", 2)], said).run() == 1
    assert said[0].startswith(f"drill: m2 of w 20 ms late: not named within {NAME_WAIT:g}s;"
                              " m0 named instead")
    assert said[-1] == ("drill: 1 member(s) made 20 ms late; 0 named; 1 missed;"
                        " another member named 1 time(s)\n")
    assert head.now == pytest.approx(NAME_WAIT, abs=POLL)


def test_a_world_that_never_quiets_is_said_and_the_next_member_made_late_anyway():
    head = Head(*["m0"] * int(CLEAR_WAIT / POLL + 2), "m2")
    said = []
    assert drill(head, [Shot(0.0, "w", "m2", 2)], said).run() == 1  # m0 was named too
    assert said[0].startswith(f"drill: w still waits for a member after {CLEAR_WAIT:g}s")
    assert said[1].endswith("named after 0.2s; m0 named instead\n".replace("0.2", f"{POLL:.1f}"))


def test_no_shot_at_all_is_no_success():
    said = []
    assert drill(Head(), [], said).run() == 1
    assert said == ["drill: 0 member(s) made 20 ms late; 0 named\n"]
