"""``mwrun drill``'s start: its arguments checked, its run found live, its targets and
schedule drawn (drill.py), and the drill that fits run: faults and scale operations
(drilling.py) or late members (``--signal SLOW``, drillslow.py)."""

from __future__ import annotations

import heapq
import json
import secrets
import sys
from collections.abc import Iterable

from mwrun import runs
from mwrun.cli import drill as d
from mwrun.cli import drillhead, drilling, drillslow
from mwrun.cli import drillscale as ds
from mwrun.errors import RunError, UsageError
from mwrun.protocol import SLOW
from mwrun.records import Shot
from mwrun.schema import PLAN


def start(run: str | None, every: str, duration: str, worlds: str | None, sig: str,
          seed: int | None, *, warn, say, scale: tuple[str, ...] = (),
          delay: float | None = None, head: str | None = None) -> int:
    """The command line's drill: checked arguments, the schedule, the drill; its exit
    status. Every mistake (numbers, signal, world, --scale, --delay, no live run) is
    one UsageError."""
    mean, length = d.seconds("--every", every), d.seconds("--for", duration)
    sig = sig.upper().removeprefix("SIG")
    if sig not in d.SIGNALS:
        raise UsageError(f"--signal can be {', '.join(d.SIGNALS)}, not {sig}")
    delay = drillslow.delay_of(sig == SLOW, delay, scale)
    only = [w.strip() for w in worlds.split(",") if w.strip()] if worlds is not None else None
    if only == []:  # --worlds "": naming none is not asking for all of them
        raise UsageError(f"--worlds names no world ({worlds!r}): give WORLD,... or leave it"
                         " out to drill every world")
    scales = ds.parse_scales(scale)
    head_every = None if head is None else d.seconds("--head", head)
    if head_every is not None and sig == SLOW:
        raise UsageError("--head kills the head; --signal SLOW breaks nothing: give one")
    try:
        run_id, state = runs.find(run, warn=warn)
        state = runs.until_head(run_id, state, warn)
        if not runs.is_live(state):
            raise RunError(f"run {run_id} is not running (it is {state.get('state')})")
        doc = runs.ask(run_id, state, {"verb": "status"}, say=warn)["status"]
    except RunError as exc:
        raise UsageError(str(exc)) from None
    ds.check_scales(doc, scales)
    if head_every is not None:
        drillhead.check(run_id)
    try:
        hit = d.targets(doc, only)
    except UsageError:
        if not scales or any(w not in {x["name"] for x in doc["worlds"]} for w in only or []):
            raise
        hit = {}  # the membership changes: someone may be hit later; each fault looks
    shots: Iterable[Shot | ds.Move | drillhead.HeadKill] = d.schedule(seed, mean, length,
                                                                       hit, scales)
    heads = None
    if head_every is not None:  # one time line: the head's kills among the faults
        shots = heapq.merge(shots, drillhead.schedule(seed, head_every, length),
                            key=lambda shot: shot.at)  # (both lazy, both in time order)
        heads = drillhead.HeadKills(run_id)
    if sig == SLOW and delay is not None:  # (delay_of gave it its default)
        return drillslow.SlowDrill((s for s in shots if isinstance(s, Shot)), delay,
                                   ask=drillslow.asker(run_id, state, warn), say=say).run()
    settings = {"every": mean, "for": length, "signal": sig, "seed": seed, "targets": only,
                **({"head_every": head_every} if head_every is not None else {})}
    _, code = drilling.Drill(run_id, state["control"], shots, settings, tty=sys.stdout.isatty(),
                    say=say, recover_wait=drilling.RECOVER_WAIT + _hang_wait(run_id, sig),
                    scales=scales, op_prefix=f"drill-{secrets.token_hex(3)}", hit=hit,
                    warn=warn, heads=heads).run()
    return code


def _hang_wait(run_id: str, sig: str) -> float:
    """A stopped member is a fault only once it is declared hung (after its
    hang_timeout, then killed and restarted): a STOP drill waits that much longer for
    its last faults. The plan as launched says the longest hang_timeout."""
    if sig != "STOP":
        return 0.0
    try:
        plan = json.loads((runs.run_path(run_id) / PLAN).read_text())
        return max(float(p["hang_timeout"]) for p in plan["processes"].values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return 90.0  # the default hang_timeout (3 x the default timeout)
