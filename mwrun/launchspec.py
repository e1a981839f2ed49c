"""What starting one process takes, on whichever host it runs: a ``LaunchSpec``.

The planner builds it once per start (``plan.environment.launch_spec``); the hands of
the process's host (``host.hands``: the head's own for its machine, ``mwrun agent``'s
on any other) start it from that alone. Over the link to an agent it travels as a
frame's fields (``to_fields``/``from_fields``), checked for shape on arrival, so the
two sides can never disagree on what a start means.

The environment is the one thing that depends on the host: mwrun's names and the
user's ``env`` are laid over *that host's* own environment (its PATH, HOME), never the
head's, after dropping what mwrun owns there (an outer job's RANK, TORCHELASTIC_*).
Shared by ``plan`` and ``host``, so it imports neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from mwrun.errors import MwrunError


class SpecError(MwrunError):
    """A launch spec of the wrong shape (a frame from another build, or damaged)."""


@dataclass(frozen=True)
class LaunchSpec:
    name: str
    argv: tuple[str, ...]
    cwd: str
    env: dict[str, str]  # mwrun's names and the user's, laid over the host's own
    unset: tuple[str, ...] = ()  # names of the host's own environment never passed on
    unset_prefixes: tuple[str, ...] = ()
    # name -> a value put before the host's own, comma-joined (PYTHONWARNINGS: ours
    # first, so a user's own entry, applied later, still wins)
    prepend: dict[str, str] = field(default_factory=dict)
    cpus: tuple[int, ...] | None = None
    netns: str | None = None  # the test stand-in for a host: run inside this namespace
    preload: tuple[str, ...] = ()  # what its zygote imports; (): started cold
    # ("script", path, args) or ("module", name, args): how a zygote runs it warm
    warm: tuple[str, str, tuple[str, ...]] | None = None

    def environ(self, host_env: Mapping[str, str]) -> dict[str, str]:
        """The process's whole environment on a host whose own is ``host_env``."""
        env = {k: v for k, v in host_env.items() if k not in self.unset
               and not (self.unset_prefixes and k.startswith(self.unset_prefixes))}
        env.update(self.env)
        for key, first in self.prepend.items():
            env[key] = ",".join(filter(None, [first, env.get(key)]))
        return env

    def to_fields(self) -> dict:
        return {"name": self.name, "argv": list(self.argv), "cwd": self.cwd,
                "env": dict(self.env), "unset": list(self.unset),
                "unset_prefixes": list(self.unset_prefixes), "prepend": dict(self.prepend),
                "cpus": list(self.cpus) if self.cpus is not None else None,
                "netns": self.netns, "preload": list(self.preload),
                "warm": [self.warm[0], self.warm[1], list(self.warm[2])] if self.warm else None}

    @classmethod
    def from_fields(cls, fields: Mapping) -> LaunchSpec:
        """The spec a frame carries; SpecError if any field has the wrong shape."""
        try:
            warm = fields.get("warm")
            spec = cls(
                name=_text(fields["name"]), argv=_texts(fields["argv"]), cwd=_text(fields["cwd"]),
                env=_mapping(fields["env"]), unset=_texts(fields.get("unset", ())),
                unset_prefixes=_texts(fields.get("unset_prefixes", ())),
                prepend=_mapping(fields.get("prepend", {})),
                cpus=None if fields.get("cpus") is None else tuple(_int(c) for c in fields["cpus"]),
                netns=None if fields.get("netns") is None else _text(fields["netns"]),
                preload=_texts(fields.get("preload", ())),
                warm=None if warm is None else (_text(warm[0]), _text(warm[1]), _texts(warm[2])))
        except (KeyError, IndexError, TypeError) as exc:
            raise SpecError(f"a malformed launch spec: {exc}") from None
        if not spec.argv:
            raise SpecError("a malformed launch spec: empty argv")
        return spec


def _text(value) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


def _texts(values) -> tuple[str, ...]:
    if not isinstance(values, (list, tuple)):
        raise TypeError(f"{values!r} is not a list")
    return tuple(_text(v) for v in values)


def _int(value) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{value!r} is not an integer")
    return value


def _mapping(values) -> dict[str, str]:
    if not isinstance(values, Mapping):
        raise TypeError(f"{values!r} is not a mapping")
    return {_text(k): _text(v) for k, v in values.items()}
