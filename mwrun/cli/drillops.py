"""``mwrun drill --scale``, its scale operations: each asked of the head through the
``scale`` request (op ids of the drill's own), never waited for, then followed with
``op`` requests until it ends."""

from __future__ import annotations

from mwrun.cli.drillscale import Move, clock_text, move_count
from mwrun.errors import RunError
from mwrun.schema import OpState

OP_POLL = 0.2  # seconds between looks at a scale operation under way
OP_WAIT = 120.0  # seconds a scale operation may take (a drain waits drain_timeout)


class Operations:
    """The drill's scale operations: each asked of the head (never waited for), then
    followed, every OP_POLL, until it ends; as the head last told them."""

    def __init__(self, prefix: str, ask, control: str, clock, still_live):
        self.prefix = prefix  # the drill's op ids: PREFIX-1, PREFIX-2, ...
        self.ask, self.control, self.clock, self.still_live = ask, control, clock, still_live
        self.records: list[dict] = []  # every operation asked
        self.running: dict[str, dict] = {}  # op id -> its record, while under way
        self.skipped: list[str] = []  # operations not asked, and why
        self.polled_at = float("-inf")

    def _record(self, move: Move, count: int, desired: int, at: float) -> dict:
        op = f"{self.prefix}-{len(self.records) + 1}"
        record = {"op": op, "process": move.process, "asked": round(at, 4),
                  "from": desired, "to": count, "state": OpState.RUNNING.value,
                  "error": None, "changes": []}
        self.records.append(record)
        return record

    def move(self, move: Move, doc: dict, hit: set[str]) -> bool:
        """Ask the head for ``move`` as the run is now (``hit``: replicas just faulted);
        whether it ended at once (refused, or nothing to change)."""
        at = self.clock()
        under_way = [op["op"] for op in self.running.values() if op["process"] == move.process]
        found = move_count(doc, move, under_way, hit)
        if isinstance(found, str):
            self.skipped.append(f"{clock_text(at)} {move.process}: {found}")
            return False
        record = self._record(move, *found, at)
        op = record["op"]
        try:
            reply = self.ask(self.control, {"verb": "scale", "op": op,
                                            "changes": [f"{move.process}={found[0]}"]})
        except RunError as exc:
            self.still_live()
            record.update(state="refused", error=str(exc))
            return False
        if reply.get("repeated"):  # another drill used this id: nothing was changed
            record.update(state="refused", error=f"op id {op} was used already")
            return False
        record.update(state=reply["state"], changes=reply["changes"])
        if record["state"] == OpState.RUNNING.value:
            self.running[op] = record
            self.polled_at = self.clock()  # asked again OP_POLL from now
            return False
        return True

    def follow(self) -> bool:
        """Each operation under way, as the head tells it now; whether one ended."""
        now = self.clock()
        if not self.running or now - self.polled_at < OP_POLL:
            return False
        self.polled_at, ended = now, False
        for op, record in list(self.running.items()):
            try:
                reply = self.ask(self.control, {"verb": "op", "op": op})
            except RunError as exc:
                self.still_live()
                record["error"] = str(exc)  # asked again next time
                continue
            record.update(state=reply["state"], changes=reply["changes"], error=None)
            if record["state"] != OpState.RUNNING.value:
                del self.running[op]
                ended = True
        return ended

    def busy(self) -> set[str]:
        """The replicas an operation of the drill's is adding or retiring now."""
        return {c["process"] for op in self.running.values() for c in op["changes"]}

    def late(self) -> float:
        """When the last operation under way has had its time (OP_WAIT)."""
        return max((op["asked"] + OP_WAIT for op in self.running.values()), default=0.0)
