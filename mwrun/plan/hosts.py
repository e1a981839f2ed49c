"""The ``hosts`` of a topology: where processes run and how mwrun reaches each host
(this machine, a network namespace of it, ssh, or a Slurm node)."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mwrun.plan.fields import NAME, NAME_RULE
from mwrun.plan.yamlread import Pos

if TYPE_CHECKING:  # the entries it checks; those modules read hosts
    from mwrun.plan.processes import ProcessSpec
    from mwrun.plan.templates import WorldTemplate

DEFAULT_HOSTS_ADDR = "127.0.0.1"
LAUNCHERS = ("ssh", "slurm", "local")
_HOST_KEYS = ("addr", "gpus", "cpus", "netns", "ssh", "ssh_options", "python")
_SSH = re.compile(r"^([A-Za-z0-9_.-]+@)?[A-Za-z0-9_.:-]*[A-Za-z0-9_.-](:[0-9]{1,5})?$")


@dataclass(frozen=True)
class Host:
    name: str
    addr: str
    gpus: int | None  # stated count; None: detect on this machine, 0 elsewhere
    cpus: int | None  # stated count; None: detect on this machine, unknown elsewhere
    netns: str | None  # a network namespace of this machine the host lives in
    pos: Pos = field(compare=False, repr=False)  # of its name
    ssh: str | None = None  # [user@]host[:port]: reached through an agent over ssh
    ssh_options: tuple[str, ...] = ()
    python: str | None = None  # the interpreter there (default: the head's own)
    slurm: bool = False  # reached through an agent that srun starts
    addr_pos: Pos | None = field(default=None, compare=False, repr=False)  # of its addr

    @property
    def remote(self) -> bool:
        """Reached through an agent (not started by the head itself)."""
        return self.ssh is not None or self.slurm



def loopback(addr: str) -> bool:
    """Whether ``addr`` is a loopback address (127.0.0.0/8, ::1, localhost), which on
    any other machine means that machine. Names are not looked up (pure)."""
    name = addr.strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def elsewhere(host: Host) -> bool:
    """Not this machine's own network: an agent's host, or a network namespace."""
    return host.remote or host.netns is not None


def _get(items, key, read, *args, **kwargs):
    return read(items[key][1], *args, **kwargs) if key in items else None


def read_hosts(r, entry, source: str, slurm: bool = False) -> dict[str, Host] | None:
    """Every host entry, or None; mistakes go to the reader ``r`` with their position.
    Under Slurm, ``addr`` may be left out: it is the node's."""
    if entry is None:
        pos = Pos(source, 0, 0)
        return {"localhost": Host("localhost", DEFAULT_HOSTS_ADDR, None, None, None, pos)}
    items = r.mapping(entry[1], "hosts")
    if items is None:
        return None
    if not items:
        r.error(entry[1], "hosts is empty; leave it out to run on localhost only")
    hosts = {}
    for name, (key_node, node) in items.items():
        what = f"host '{name}'"
        if not NAME.match(name):
            r.error(key_node, f"{what}: {NAME_RULE}")
        spec = r.mapping(node, what)
        if spec is None:
            continue
        r.known_keys(spec, _HOST_KEYS, what)
        if "addr" not in spec and not slurm:
            r.error(node, f"{what}: 'addr' is missing (an IP address or host name)")
        addr = _get(spec, "addr", r.string, f"{what}: addr")
        gpus = _get(spec, "gpus", r.integer, f"{what}: gpus", minimum=0)
        cpus = _get(spec, "cpus", r.integer, f"{what}: cpus", minimum=1)
        netns = _get(spec, "netns", r.string, f"{what}: netns")
        ssh = _get(spec, "ssh", r.string, f"{what}: ssh")
        if ssh is not None and not _SSH.match(ssh):
            r.error(spec["ssh"][1], f"{what}: ssh '{ssh}': write [user@]host[:port]")
        if ssh is not None and netns is not None:
            r.error(spec["ssh"][1], f"{what}: 'ssh' and 'netns' exclude each other")
        options = _get(spec, "ssh_options", r.string_list, f"{what}: ssh_options")
        python = _get(spec, "python", r.string, f"{what}: python")
        hosts[name] = Host(name, addr or "", gpus, cpus, netns, r.pos(key_node), ssh,
                           tuple(options or ()), python, slurm,
                           r.pos(spec["addr"][1]) if "addr" in spec else None)
    return hosts


def check_loopbacks(diagnostics: list, hosts: dict[str, Host], specs: dict[str, ProcessSpec],
                    worlds: dict[str, WorldTemplate]) -> None:
    """A world with a member on another machine (an agent's host, a namespace)
    reaches the store on the head's address and each member on its host's: a
    loopback there is the member's own machine, where the world would sit forming
    with nothing said. Every such address is refused where it is written."""
    head = next((n for n, h in hosts.items() if not elsewhere(h)), None)
    host_of = {p.name: s.base.host for s in specs.values()
               for p in s.made(tuple(range(s.scale.max)) if s.scale else None)}
    host_of.update({n: s.base.host for n, s in specs.items()})
    said: set[str] = set()
    for t in worlds.values():
        on = {host_of[ref] for ref in t.refs if host_of.get(ref) in hosts}
        away = sorted(h for h in on if elsewhere(hosts[h]))
        if not away:
            continue
        # A member's host is reached by the world's other hosts; the head, by all.
        reached = (on if len(on) > 1 else set()) | ({head} if head else set())
        for name in sorted(reached):
            host = hosts[name]
            if name in said or not loopback(host.addr):
                continue
            said.add(name)
            other = next((h for h in away if h != name), None)
            role = "the worlds' stores live there" if name == head else \
                "its members' peers reach them there"
            diagnostics.append((host.addr_pos or host.pos).diagnostic(
                f"host '{name}': addr {host.addr} is a loopback address, but world"
                f" '{t.name}' has members on "
                + (f"host '{other}', which would take it for its own machine"
                   if other else "other machines") +
                f" ({role}); write an address the other hosts reach it on"))
