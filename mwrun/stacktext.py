"""Stacks as text: what ``mwrun stacks`` prints and what a post-mortem bundle's
``stacks.txt`` holds (head/postmortem.py), from the same member records: per member
its name, pid, host and the world call it is in (and for how long), then its threads'
Python stacks, innermost frame last as in a traceback; a member that told nothing is
named with the reason. Pure functions over what a run writes, so the head and the
command line share them and neither imports the other.
"""

from __future__ import annotations


def member_call(threads: list[dict]) -> dict | None:
    """The world call a member is in: its main thread's, else its longest one."""
    calls = [(not t.get("main"), -t["call"].get("for_s", 0.0), t["call"])
             for t in threads if isinstance(t.get("call"), dict)]
    return min(calls, key=lambda c: c[:2])[2] if calls else None


def call_text(call: dict | None) -> str:
    if call is None:
        return "in no world call"
    return f"in {call.get('world')}.{call.get('call')} for {call.get('for_s', 0.0):.1f}s"


def render(members: list[dict]) -> str:
    """Every member: a header line, then (if it answered) each thread's stack."""
    return "\n".join(_member(m) for m in members)


def _member(member: dict) -> str:
    where = f"{member.get('process')}  pid {member.get('pid')} on {member.get('host')}"
    if not member.get("answered"):
        return f"{where}  {member.get('reason')}\n"
    threads = [t for t in member.get("threads", []) if isinstance(t, dict)]
    lines = [f"{where}  {call_text(member_call(threads))}  ({len(threads)} threads)"]
    if member.get("error"):
        lines.append(f"  its library could not read its stacks: {member['error']}")
    if member.get("trimmed"):
        lines.append(f"  its answer was trimmed to fit one message: {member['trimmed']}")
    for thread in threads:
        lines += _thread(thread)
    return "\n".join(lines) + "\n"


def _thread(thread: dict) -> list[str]:
    tags = [tag for tag, on in (("main", thread.get("main")),
                                ("daemon", thread.get("daemon"))) if on]
    head = f"  Thread {thread.get('name')}" + (f" ({', '.join(tags)})" if tags else "")
    if isinstance(thread.get("call"), dict):
        head += f"  {call_text(thread['call'])}"
    lines = [head]
    if thread.get("cut"):
        lines.append("    ... (outer frames left out)")
    for frame in thread.get("stack", []):
        if isinstance(frame, list) and len(frame) == 4:
            path, line, function, text = frame
            lines.append(f'    File "{path}", line {line}, in {function}')
            if text:
                lines.append(f"      {text}")
    return lines
