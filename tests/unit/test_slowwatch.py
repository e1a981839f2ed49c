"""The slow member told as it changes (head/observe/slowwatch.py): down to every member
of its world and into the history, once per change; pure, with a scripted verdict."""

from mwrun.head.observe.slowwatch import CLEAR_AFTER, SlowWatch


def named(member: str, lag: float = 0.02) -> dict:
    return {"member": member, "lag_s": lag, "calls": 40,
            "waits_s": {member: 0.001, "leader": lag + 0.001}}


class Scripted:
    """The verdicts of each check in turn, and what was told and recorded."""

    def __init__(self, *verdicts):
        self.verdicts = list(verdicts)
        self.told, self.records = [], []
        self.watch = SlowWatch(lambda now: self.verdicts.pop(0),
                               {"w": ["leader", "worker-1"], "v": ["leader", "worker-2"]},
                               lambda process, message: self.told.append((process, message)),
                               self.records.append)

    def run(self, step: float = 1.0) -> None:
        now = 0.0
        while self.verdicts:
            self.watch.check(now)
            now += step


def test_a_member_named_is_told_to_every_member_once_and_recorded():
    run = Scripted({"w": (2, named("worker-1")), "v": (0, None)},
                   {"w": (2, named("worker-1", 0.03)), "v": (0, None)})
    run.run()
    message = {"verb": "slow", "world": "w", "generation": 2, "member": "worker-1",
               "lag_s": 0.02, "calls": 40}
    assert run.told == [("leader", message), ("worker-1", message)]
    assert run.records == [{"event": "slow", "world": "w", "generation": 2,
                            "member": "worker-1", "lag_s": 0.02, "collectives": 40,
                            "waits_s": {"worker-1": 0.001, "leader": 0.021}}]


def test_none_any_more_is_told_only_after_a_quiet_spell():
    quiet = int(CLEAR_AFTER)
    verdicts = [{"w": (1, named("worker-1"))}] + [{"w": (1, None)}] * 2 + \
        [{"w": (1, named("worker-1"))}] + [{"w": (1, None)}] * (quiet + 1)
    run = Scripted(*verdicts)
    run.run()
    members = [r["member"] for r in run.records]
    assert members == ["worker-1", None]  # the short gap was never told
    assert run.told[-1] == ("worker-1", {"verb": "slow", "world": "w", "generation": 1,
                                         "member": None})


def test_another_member_named_is_told_at_once_and_a_removed_world_forgotten():
    run = Scripted({"w": (1, named("worker-1"))}, {"w": (1, named("leader"))}, {},
                   {"w": (0, named("leader"))})
    run.run()
    assert [(r["world"], r["member"]) for r in run.records] == [
        ("w", "worker-1"), ("w", "leader"), ("w", "leader")]  # made again: told afresh
