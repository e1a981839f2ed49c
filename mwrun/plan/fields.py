"""Typed readers for the fields of a process entry: cmd, gpus, cpus, env.

Each reads one YAML node, records a positioned diagnostic for every mistake (through
the Reader it extends) and returns the value or None.
"""

from __future__ import annotations

import math
import re
import shlex

import yaml

from mwrun.plan import preload as _preload
from mwrun.plan.yamlread import Reader, _kind, scalar_value

# Names of hosts, processes and worlds.
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
NAME_RULE = "a name starts with a letter or '_' and holds only letters, digits, '_', '.', '-'"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Set by mwrun for every process; a user value would silently lose or break ranks.
RESERVED_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT", "GROUP_RANK", "ROLE_RANK", "CUDA_VISIBLE_DEVICES")
RESERVED_ENV_PREFIXES = ("MWRUN_", "TORCHELASTIC_")


# YAML 1.2's float form: PyYAML (YAML 1.1) reads 1e10 and 1.5e3 (no dot, or an
# exponent without its sign) as strings; a number of seconds written so is a number.
_FLOAT_12 = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)[eE][-+]?[0-9]+$")
# The longest timeout mwrun takes: a year. Torch keeps a deadline as int64 nanoseconds
# of its clock (about 292 years, so 1e10 s overflows it and every member dies) and
# Python's timedelta ends at 999,999,999 days (1e14 s is an OverflowError); the chain
# multiplies a timeout (3 x for hang_timeout, 2 x + 90 s for rejoin), and a year
# leaves room for all of that while being longer than any job means to wait.
MAX_SECONDS = 365 * 24 * 3600.0


def listen_error(text: str) -> str | None:
    """Why ``text`` is not HOST:PORT to listen on (an IPv6 address in brackets:
    [::1]:9400), or None where it is."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return f"'{text}' is not HOST:PORT (a port from 1 to 65535; 0.0.0.0:9400 for all)"
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        return f"'{text}': write an IPv6 address in brackets, as [::1]:{port}"
    return None


def parse_cpus(text: str) -> tuple[int, ...]:
    """'0-3,6' -> (0, 1, 2, 3, 6); raises ValueError with a readable message."""
    cpus: list[int] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            raise ValueError(f"empty item in CPU list '{text}'")
        low, sep, high = part.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise ValueError(f"'{part}' is not a CPU number or range like 0-3")
        first, last = int(low), int(high) if sep else int(low)
        if last < first:
            raise ValueError(f"range '{part}' runs backwards")
        cpus.extend(range(first, last + 1))
    return tuple(cpus)


class FieldReader(Reader):
    """A Reader that also knows the fields of a process entry."""

    def number(self, node, what, minimum: float | None = None, positive: bool = False,
               infinite: bool = False) -> float | None:
        """Seconds: a finite number (1e10 as written in YAML 1.2 included) of at most
        MAX_SECONDS; ``.inf`` only where ``infinite`` (hang_timeout: detection off)."""
        if isinstance(node, yaml.ScalarNode) and node.style is None \
                and isinstance(scalar_value(node), str) and _FLOAT_12.match(node.value):
            node = yaml.ScalarNode("tag:yaml.org,2002:float", node.value, node.start_mark,
                                   node.end_mark)
        value = super().number(node, what, minimum, positive)
        if value is None or (infinite and value == math.inf):
            return value
        if not math.isfinite(value):
            self.error(node, f"{what} must be a finite number of seconds, not {value}"
                       + ("" if value < 0 else " (a timeout that never ends is none:"
                          " leave it out, or write the longest wait you mean)"))
            return None
        if value > MAX_SECONDS:
            self.error(node, f"{what}: {value:g} seconds is more than a year (at most"
                             f" {MAX_SECONDS:.0f}); torch's deadlines overflow past"
                             " that")
            return None
        return value

    def command(self, node, what) -> list[str] | None:
        if isinstance(node, yaml.SequenceNode):
            items = [self.string(item, f"{what}: cmd item") for item in node.value]
            parts = [p for p in items if p is not None]
            if len(parts) < len(items):
                return None
        else:
            text = self.string(node, f"{what}: cmd")
            if text is None:
                return None
            try:
                parts = shlex.split(text)
            except ValueError as exc:
                self.error(node, f"{what}: cmd cannot be split like a shell line: {exc}")
                return None
        if not parts or not parts[0]:
            self.error(node, f"{what}: cmd is empty")
            return None
        return parts

    def string_list(self, node, what) -> list[str] | None:
        """A list of strings (ssh options and the like), each item checked."""
        items = self.sequence(node, what)
        if items is None:
            return None
        values = [self.string(item, f"{what} item") for item in items]
        strings = [v for v in values if v is not None]
        return None if len(strings) < len(values) else strings

    def gpus(self, node, what) -> tuple[int, ...] | int | None:
        if isinstance(node, yaml.ScalarNode):
            return self.integer(node, f"{what}: gpus (a count)", minimum=0)
        items = self.sequence(node, f"{what}: gpus")
        if items is None:
            return None
        gpus = []
        for item in items:
            index = self.integer(item, f"{what}: gpu index", minimum=0)
            if index is not None and index in gpus:
                self.error(item, f"{what}: GPU {index} is listed twice")
            elif index is not None:
                gpus.append(index)
        return tuple(gpus)

    def cpus(self, node, what) -> tuple[int, ...] | int | None:
        if isinstance(node, yaml.SequenceNode):
            cpus: list[int] = []
            for item in node.value:
                part = self.string(item, f"{what}: cpus item")
                if part is not None:
                    cpus.extend(self._cpu_text(part, item, what) or ())
            found: tuple[int, ...] | None = tuple(cpus)
        elif isinstance(node, yaml.ScalarNode) and type(scalar_value(node)) is int:
            return self.integer(node, f"{what}: cpus (a count)", minimum=1)
        else:
            text = self.string(node, f"{what}: cpus")
            found = None if text is None else self._cpu_text(text, node, what)
        if found is not None and len(set(found)) != len(found):
            self.error(node, f"{what}: a CPU is listed twice in cpus")
        return found

    def _cpu_text(self, text, node, what):
        try:
            return parse_cpus(text)
        except ValueError as exc:
            self.error(node, f"{what}: cpus: {exc}")
            return None

    def env(self, node, what) -> dict[str, str] | None:
        items = self.mapping(node, f"{what}: env")
        if items is None:
            return None
        env = {}
        for key, (key_node, value_node) in items.items():
            if not _ENV_NAME.match(key):
                self.error(key_node, f"{what}: env: '{key}' is not a valid variable name")
                continue
            if key in RESERVED_ENV or key.startswith(RESERVED_ENV_PREFIXES):
                hint = "; use 'gpus:' instead" if key == "CUDA_VISIBLE_DEVICES" else ""
                self.error(key_node, f"{what}: env: {key} is set by mwrun{hint}")
                continue
            value = scalar_value(value_node) if isinstance(value_node, yaml.ScalarNode) else None
            if isinstance(value, bool):
                self.error(value_node, f"{what}: env {key}: write the value in quotes"
                                    f" ('{str(value).lower()}'): YAML reads it as a boolean")
            elif value is None and isinstance(value_node, yaml.ScalarNode):
                env[key] = ""
            elif isinstance(value_node, yaml.ScalarNode) and not isinstance(value, str):
                # YAML 1.1 rewrites plain numbers and times (010 -> 8, 0x10 -> 16,
                # 1.10 -> 1.1, 12:30 -> 750); a variable gets the text as written.
                env[key] = value_node.value
            else:
                text = self.string(value_node, f"{what}: env {key}")
                if text is not None:
                    env[key] = text
        return env

    def metrics(self, node, what) -> str | None:
        """``metrics: {addr: HOST:PORT}``: where the head serves Prometheus metrics."""
        items = self.mapping(node, what)
        if items is None:
            return None
        self.known_keys(items, ("addr",), what)
        if "addr" not in items:
            self.error(node, f"{what}: give addr: HOST:PORT (0.0.0.0:9400 serves every"
                       " address of the head's machine)")
            return None
        addr = self.string(items["addr"][1], f"{what} addr")
        why = None if addr is None else listen_error(addr)
        if why is not None:
            self.error(items["addr"][1], f"{what} addr {why}")
        return addr if why is None else None

    def preload(self, node, what, where: dict | None = None) -> tuple[str, ...] | None:
        """Module names to import in the zygote; ``false`` (or ``[]``) turns warm starts
        off, ``true`` means [torch] (the default). ``where`` gets each name's position
        (``preload:NAME``)."""
        if isinstance(node, yaml.ScalarNode) and isinstance(scalar_value(node), bool):
            return _preload.DEFAULT if scalar_value(node) else ()
        if not isinstance(node, yaml.SequenceNode):
            self.error(node, f"{what} must be a list of module names (like [torch]) or"
                             f" false, not {_kind(node)}")
            return None
        modules: list[str] = []
        for item in node.value:
            name = self.string(item, f"{what} item")
            if name is None:
                continue
            if not _preload.is_module_name(name):
                self.error(item, f"{what}: '{name}' is not a module name (like torch or"
                                 " numpy.linalg)")
            elif name in modules:
                self.error(item, f"{what}: '{name}' is listed twice")
            else:
                modules.append(name)
                if where is not None:
                    where[f"preload:{name}"] = self.pos(item)
        return tuple(modules)
