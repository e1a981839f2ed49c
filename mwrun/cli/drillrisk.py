"""What a drill's schedule may cost the job, said before its first fault: a pure
function of the status document (each process's ``restart`` policy and
``restarts_left``), the members the drill may hit and its mean number of faults.

A drill's own faults spend none of a process's max_restarts: the head restarts a
process a drill signalled whatever its exit code, and counts that restart apart
(head/policy.py). What the schedule can still use up is what it breaks around its
targets:

- a target whose policy is ``restart: never``: its first fault ends it for good;
- a member of a faulted world that the fault does not hit and that does not use
  mwrun's library (no traffic of its own in the document): a break reaches a plain
  torch.distributed member as torch's own error, which ends it, and that failure is
  its own, counted against its max_restarts. When the faults planned on its worlds
  reach the restarts it has left, the drill can fail the job it measures.

The drill warns and goes on; it does not refuse. Whether a member dies when its world
breaks is its code's choice, which the drill cannot see: a member that catches torch's
error survives every fault, and a refusal would forbid a drill that costs nothing. The
warning names who and how much before the first fault, when Ctrl-C still costs
nothing; a drill that does use them up says so at its end (the world not recovered).
"""

from __future__ import annotations

NEVER = "never"  # topology.py's restart policy that never restarts


def risks(doc: dict, hit: dict[str, list[tuple[str, int]]], faults: float) -> list[str]:
    """What the schedule (about ``faults`` faults, spread evenly over ``hit``: world ->
    the members it may hit, as (process, rank)) can use up, a line per process; [] when
    nothing, or when the head does not say what is left (an older mwrun's)."""
    procs = {p["name"]: p for p in doc["processes"]}
    if not hit or any("restarts_left" not in p for p in procs.values()):
        return []
    members = {w["name"]: w["members"] for w in doc["worlds"]}
    per_world = faults / len(hit)
    found = []
    never = sorted({p for own in hit.values() for p, _ in own
                    if procs[p]["restart"] == NEVER})
    if never:
        found.append(f"{', '.join(never)} {'has' if len(never) == 1 else 'have'} restart:"
                     " never: the drill's first fault on it ends it for good (its world"
                     " does not come back)")
    exposed: dict[str, float] = {}  # process -> faults planned on its worlds, hitting another
    for world, own in hit.items():
        for member in members.get(world, []):
            others = sum(1 for p, _ in own if p != member) / len(own)
            exposed[member] = exposed.get(member, 0.0) + per_world * others
    for name, planned in exposed.items():
        proc = procs.get(name)
        if proc is None or planned <= 0 or proc.get("traffic"):
            continue  # gone, never exposed, or told of a break by mwrun's library
        left = proc["restarts_left"]
        if proc["restart"] == NEVER:
            cost = "has restart: never: the first can end it for good"
        elif planned >= left:
            cost = (f"has {left} restart(s) left: each can spend one (the drill's own"
                    " signals spend none), and the job fails when none is left")
        else:
            continue
        found.append(f"{name} does not use mwrun's library (a break ends a plain"
                     f" torch.distributed member) and is in world(s) the drill faults about"
                     f" {planned:.0f} time(s) through another member; it {cost}")
    return found
