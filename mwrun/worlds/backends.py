"""One generation of a world as a stock torch process group, and how to abort it.

gloo: a ``ProcessGroupGloo`` on a device bound to this host's address, aborted by its
own ``abort()`` where that works, else by shutting down its connections (see
gloo_abort); where neither can, one warning says that blocked calls of a broken world
wait for the world's timeout. nccl: a ``ProcessGroupNCCL`` on the
pinned GPU (``cuda:0`` under ``CUDA_VISIBLE_DEVICES``), under the discipline of
``nccl.py`` (the communicator alone is cleaned up on error, never the process), made
nonblocking where the NCCL allows, bound to its device and connected eagerly at join
so a broken peer is found when the world forms, not at the first call, and
``abort()`` on break (never destroyed; see aborts.py) so kernels waiting on a dead
peer are cancelled.

The torch module is a parameter so the nccl path is unit-tested without a GPU.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
import threading
from datetime import timedelta

from mwrun import lookups
from mwrun.errors import MwrunError
from mwrun.worlds import gloo_abort
from mwrun.worlds import nccl as discipline

log = logging.getLogger("mwrun")
# Before any store client of this process connects (world.py imports this module):
# torch's store connections then never reverse-resolve a peer (see lookups.py).
lookups.numeric_only()
# The first torch whose ProcessGroupGloo.abort() fails a call blocked in it. None yet:
# in 2.13 abort() and shutdown() return at once and leave a blocked recv or all_reduce
# waiting for the timeout (tests/integration/test_arguments.py checks this on the
# installed torch, so this line is corrected when a torch fixes it).
GLOO_ABORT_WORKS_SINCE: tuple[int, int] | None = None
_warned = False


def native_gloo_abort_works(version: str | None = None) -> bool:
    """Whether this torch's own ProcessGroupGloo.abort() unblocks a blocked call."""
    if GLOO_ABORT_WORKS_SINCE is None:
        return False
    if version is None:
        import torch

        version = torch.__version__
    major, minor = (int(part) for part in version.split(".")[:2])
    return (major, minor) >= GLOO_ABORT_WORKS_SINCE


def _warn_no_abort(timeout: float) -> None:
    global _warned
    if not _warned:
        _warned = True
        log.warning("mwrun: this torch cannot abort a gloo process group, and mwrun cannot"
                    " find its connections to shut them down (not Linux, or another gloo"
                    " transport): a call blocked in a world that breaks fails only at the"
                    " world's timeout (%gs), not at once", timeout)


class Backend:
    """A generation's process group with its device, and a way to abort it."""

    def __init__(self, name: str, group, device, abort=None, release=None):
        self.name = name
        self.group = group
        self.device = device
        self._abort = abort
        self._release = release
        self._aborting = threading.Lock()
        self.aborted = False  # an abort was started: a second one is never started

    def abort(self) -> None:
        """Make every pending and future operation of the group fail promptly. Only
        the first call aborts (an abort that hung is never started again)."""
        with self._aborting:
            if self.aborted or self._abort is None:
                return
            self.aborted = True
        result = self._abort()
        log.debug("aborted %s group: %s", self.name, result)

    def release(self) -> None:
        """Drop the group; its threads and sockets go with the last reference."""
        self.group = None
        release, self._release = self._release, None
        if release is not None:
            release()


def local_address(peer: str) -> str:
    """The address of this host that routes to ``peer`` (no packet is sent)."""
    family = socket.AF_INET6 if ":" in peer else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((peer, 9))
            return probe.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def store_listener(addr: str, port: int) -> int | None:
    """A listening descriptor for a store on ``addr`` only (torch's TCPStore would
    listen on every interface); None where ``addr`` is not this machine's to bind, and
    the store then listens as torch does. OSError if the port is taken."""
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((addr, port))
        sock.listen(512)
    except OSError as exc:
        sock.close()
        if exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT) or \
                isinstance(exc, socket.gaierror):
            return None
        raise
    return sock.detach()  # the store owns it now


def gloo_device(cls, local_addr: str):
    """A gloo device (with its sockets, see gloo_abort) bound to ``local_addr``; else to
    the interface that holds it; only then the default device, which resolves this
    node's host name (a DNS lookup where /etc/hosts does not have it)."""
    with contextlib.suppress(RuntimeError):
        return gloo_abort.device(lambda: cls.create_device(hostname=local_addr))
    interface = lookups.interface_of(local_addr)
    if interface is not None:
        with contextlib.suppress(RuntimeError):
            return gloo_abort.device(lambda: cls.create_device(interface=interface))
    return gloo_abort.device(cls.create_default_device)


def named(options, name: str) -> None:
    """The group's name as torch's Flight Recorder shows it (its entries and
    ``pg_config``), so a dump says which world and generation each call was in."""
    if name:
        with contextlib.suppress(AttributeError, TypeError):
            options.group_name = name


def gloo(store, rank: int, size: int, timeout: float, local_addr: str, c10d=None,
         name: str = "") -> Backend:
    if c10d is None:
        import torch.distributed as c10d
    cls = c10d.ProcessGroupGloo
    options = cls._Options()
    options._timeout = timedelta(seconds=timeout)
    named(options, name)
    device, sockets = gloo_device(cls, local_addr)
    options._devices = [device]
    try:
        group = cls(store, rank, size, options)
    except BaseException:
        if sockets:
            sockets.close()
        raise
    import torch

    abort = sockets.abort if sockets else None
    if native_gloo_abort_works() and getattr(group, "abort", None) is not None:
        abort = group.abort
    elif abort is None:
        _warn_no_abort(timeout)
    return Backend("gloo", group, torch.device("cpu"), abort=abort,
                   release=sockets.close if sockets else None)


def nccl_device(torch_module, device_index: int | None = None):
    """The GPU of this process: the first visible one unless an index is given."""
    cuda = torch_module.cuda
    if not cuda.is_available():
        raise MwrunError("backend nccl needs a GPU, and torch sees none here"
                         " (is CUDA_VISIBLE_DEVICES empty?)")
    index = 0 if device_index is None else device_index
    if index >= cuda.device_count():
        raise MwrunError(f"GPU {index} is not visible to this process"
                         f" ({cuda.device_count()} visible)")
    return torch_module.device("cuda", index)


def nccl(store, rank: int, size: int, timeout: float, device, c10d=None,
         torch_module=None, name: str = "") -> Backend:
    if c10d is None:
        import torch.distributed as c10d
    if torch_module is None:
        import torch as torch_module
    cls = getattr(c10d, "ProcessGroupNCCL", None)
    if cls is None:
        raise MwrunError("backend nccl: this torch build has no NCCL; use backend gloo")
    if device is None:  # under the launcher: the one GPU CUDA_VISIBLE_DEVICES leaves
        device = nccl_device(torch_module)
    discipline.ensure_env(timeout)  # by hand; under the launcher it is set already
    torch_module.cuda.set_device(device)
    options = cls.Options()
    options._timeout = timedelta(seconds=timeout)  # torch's watchdog judges calls by it
    options.is_high_priority_stream = False
    named(options, name)
    if discipline.nonblocking_ok(discipline.version(torch_module)) and \
            hasattr(options, "config"):
        options.config.blocking = 0  # set-up and abort never block a thread of ours
    group = cls(store, rank, size, options)
    with contextlib.suppress(AttributeError, TypeError, RuntimeError):
        group.bound_device_id = device  # as init_process_group(device_id=...) binds it
    # Eager set-up: the communicator forms now, while every member is known to be here.
    group.eager_connect_single_device(device)
    return Backend("nccl", group, device, abort=group.abort)


def create(name: str, store, rank: int, size: int, timeout: float, *, local_addr: str,
           device=None, group: str = "") -> Backend:
    """``group``: the group's name in torch's Flight Recorder ("WORLD-gGEN")."""
    if name == "gloo":
        return gloo(store, rank, size, timeout, local_addr, name=group)
    return nccl(store, rank, size, timeout, device, name=group)
