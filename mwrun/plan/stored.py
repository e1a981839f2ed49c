"""A plan as the run folder keeps it (``plan.json``), and back.

The launch hands its detached head the plan this way (JSON, never a pickle: what a run
folder holds must stay readable by a head of another version), and a head that takes a
run over loads its desired state from it (DESIGN "A head that can die"). Pure: JSON
values in, the plan's own types out, each field checked against its type hint; a field
that does not fit is a ``RunError`` naming it, never a half-made plan.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from typing import Any

from mwrun.errors import RunError
from mwrun.plan.placement import Plan, ProcessPlan, WorldPlan


def dump(plan: Plan) -> dict:
    """The plan as JSON values (tuples become lists, enums their values, on the way)."""
    return dataclasses.asdict(plan)


def load(data: object, source: str = "plan.json") -> Plan:
    """The plan ``dump`` made, from its JSON; RunError (naming the field) if it is not."""
    return _load(Plan, data, source)


def dump_process(proc: ProcessPlan) -> dict:
    """One process's plan as JSON values (a revision keeps those it made: a head that
    takes the run over lays them over the launch plan, membership/replay.py)."""
    return dataclasses.asdict(proc)


def load_process(data: object, source: str) -> ProcessPlan:
    """The process ``dump_process`` made; RunError (naming the field) if it is not."""
    return _load(ProcessPlan, data, source)


def dump_world(world: WorldPlan) -> dict:
    """One world's plan as JSON values (what the head tells the worlds' keeper)."""
    return dataclasses.asdict(world)


def load_world(data: object, source: str) -> WorldPlan:
    """The world ``dump_world`` made; RunError (naming the field) if it is not."""
    return _load(WorldPlan, data, source)


def _load(kind: Any, value: object, where: str) -> Any:
    if dataclasses.is_dataclass(kind):
        return _record(kind, value, where)
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        [inner] = [a for a in args if a is not type(None)]  # the plan's: X | None only
        return _load(inner, value, where)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise _bad(where, value, "a list")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_load(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
        if len(value) != len(args):
            raise _bad(where, value, f"a list of {len(args)}")
        return tuple(_load(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value,
                                                                               strict=True)))
    if origin is dict:
        if not isinstance(value, dict):
            raise _bad(where, value, "an object")
        key, item = args
        return {_load(key, k, where): _load(item, v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        try:
            return kind(value)
        except ValueError:
            raise _bad(where, value, "one of " + ", ".join(str(m.value) for m in kind)) from None
    return _scalar(kind, value, where)


def _record(kind: Any, value: object, where: str) -> Any:
    if not isinstance(value, dict):
        raise _bad(where, value, "an object")
    hints = typing.get_type_hints(kind)
    fields = {f.name: f for f in dataclasses.fields(kind)}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise RunError(f"{where}: unknown field {unknown[0]!r}")
    missing = [name for name, f in fields.items() if name not in value
               and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise RunError(f"{where}: {missing[0]!r} is missing")
    return kind(**{name: _load(hints[name], item, f"{where}.{name}")
                   for name, item in value.items()})


def _scalar(kind: Any, value: object, where: str) -> Any:
    # bool is an int to Python, never to a plan; an int is a float's value in JSON.
    if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if kind in (int, str, bool) and type(value) is kind:
        return value
    raise _bad(where, value, getattr(kind, "__name__", str(kind)))


def _bad(where: str, value: object, wanted: str) -> RunError:
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return RunError(f"{where}: {shown} is not {wanted}")
