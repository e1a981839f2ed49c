"""No DNS lookup while a world forms: torch's store connections kept numeric.

torch's TCPStore names the peer of every store connection, client and (libuv) server
side, with ``c10d::detail::formatSockAddr`` (torch/csrc/distributed/c10d/socket.cpp),
which calls ``getnameinfo`` without ``NI_NUMERICHOST``: a reverse (PTR) lookup per
connection, for a name that only ever goes into log and error messages. On a host
whose resolver is slow or unreachable that stalls a connection for seconds (a
nameserver that never answers costs its full timeout per connection: worlds form in
waves), and at scale it is thousands of queries at the site's DNS. The store's peers
are IPv4-mapped IPv6 addresses (``::ffff:127.0.0.1``), which /etc/hosts does not
answer, so even a job on 127.0.0.1 asks the nameserver.

``numeric_only()`` makes libtorch_cpu.so's calls of getnameinfo numeric, in this
process: the library's slot for getnameinfo (its GOT entry, which the dynamic loader
fills with libc's address) is pointed at 23 bytes of machine code that add
``NI_NUMERICHOST`` to the call's flags (its 7th argument, on the stack) and jump to
libc's getnameinfo. torch then formats every peer as it always does on a host whose
resolver has no name for it (``[::ffff:127.0.0.1]:PORT``), true address and port,
without a query. Of the library's callers of getnameinfo (torch 2.13: formatSockAddr
and cpp-httplib's, which already ask for numbers) only formatSockAddr changes.

Not torch's own switch, its function-static ``disable_getnameinfo`` (set when a lookup
fails, pytorch PR #159596), which mwrun set until 2026-11: once it is set
formatSockAddr formats the wrong bytes, ``reinterpret_cast<sockaddr_in*>(&addr)`` (the
address of the pointer, not the pointer: 16 bytes of its own stack frame) and a port
not byte-swapped, so every message printed ``[::f065:7837:ff7f:0]:3292`` for a store
at 127.0.0.1 (tests/unit/test_lookups.py shows it).

The slot is found in the file the way the loader finds it (mwrun/elfslot.py: program
headers, dynamic section, relocations; never the section headers), and written only
when it is exactly one 8-byte slot in writable memory of this process mapped from that
file, holding libc's getnameinfo or (lazy binding) the library's own first value;
while it holds the code this module wrote, nothing more is done. Any doubt (not Linux,
not x86-64, torch not loaded, another library, a damaged file, another hook in the
slot, no executable memory to be had) and nothing is written: the reason is returned,
and torch behaves as it always did. Cost: some 15 ms, once per process (searches
through the library's dynamic string, symbol and relocation tables, 16 MB in all); a
warm child inherits the slot and the code from its zygote, and what was found (kept
on ``sys``): 0.2 ms.

Why this and not an LD_PRELOAD wrapper of getnameinfo (which works as well on the
wire): a wrapper is a compiled shared object, and mwrun is pure Python with no
compiler guaranteed where it runs, so it would ship binaries per architecture and
libc; it must be in the environment before a process starts, so it cannot reach the
running head, nor a script that imports mwrun by hand; it is inherited by everything
the job starts (compilers, ssh, the user's subprocesses) and changes getnameinfo for
all their code, where the slot changes the calls of one library, in the one process
that asks; and it competes with other preloads (jemalloc, profilers) for a variable a
user may already set.

``interface_of(addr)``: the network interface that holds an address (gloo binds to it
by name, where naming the address failed, instead of resolving the node's host name).

Imports nothing of mwrun but elfslot, and never torch (it only touches the library
torch loaded); psutil (for ``interface_of``).
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import mmap
import os
import platform
import struct
import sys
import threading

from mwrun import elfslot

LIBRARY = "libtorch_cpu.so"
FUNCTION = b"getnameinfo"
NI_NUMERICHOST = 1  # glibc's <netdb.h>

# What the slot points at: the caller's flags made numeric, then libc's getnameinfo
# with every argument as it was (the return address still the caller's).
_CODE = (b"\xf3\x0f\x1e\xfa"            # endbr64: a valid indirect-jump target under CET
         b"\x83\x4c\x24\x08" + bytes([NI_NUMERICHOST]) +  # orl $1, 8(%rsp): 7th argument
         b"\xff\x25\x00\x00\x00\x00")   # jmp *0(%rip): to the 8 bytes that follow
_PAGE = mmap.PAGESIZE

_lock = threading.Lock()
# Where the slot was redirected in this process: (library path, load address, slot
# offset, the code's address). Kept on ``sys``, which outlives this module: a warm child
# (host/child.py) imports mwrun afresh into a process whose library already calls the
# code, and need not search the tables again.
_SET = "_mwrun_numeric_only"
_done = False


def numeric_only() -> str | None:
    """Make torch's store connections in this process name their peers numerically
    (no reverse DNS lookup). Idempotent, and cheap after the first success; never
    imports torch: while its library is not loaded nothing is done (call again after
    ``import torch``). Returns None once set, else why it was not (nothing changed)."""
    global _done
    if _done:
        return None
    with _lock:
        try:
            reason = _redirect()
        except Exception as exc:  # whatever went wrong, torch is left as it was
            reason = f"{type(exc).__name__}: {exc}"
        _done = reason is None
        return reason


def _redirect() -> str | None:
    if not sys.platform.startswith("linux"):
        return f"not Linux ({sys.platform})"
    if platform.machine() != "x86_64":
        return f"the slot's code is written for x86-64 only, this is {platform.machine()}"
    loaded = loaded_objects(LIBRARY)
    if not loaded:
        return f"{LIBRARY} is not loaded (torch not imported yet)"
    if len(loaded) > 1:
        return f"{LIBRARY} is loaded {len(loaded)} times: {sorted(loaded)}"
    (path, base), = loaded.items()
    done = getattr(sys, _SET, None)
    if done is not None and done[:2] == (path, base) and \
            ctypes.c_uint64.from_address(base + done[2]).value == done[3]:
        return None  # set before, in this process or the one it was forked from
    found = elfslot.slot_in_file(path, FUNCTION)
    if isinstance(found, str):
        return found
    where = mapping_of(mappings(), base + found.address, 8)
    if where is None or not where[0].startswith("rw") or \
            os.path.realpath(where[1]) != os.path.realpath(path):
        return f"{LIBRARY}'s getnameinfo slot is not mapped where the loader says" \
               f" ({base:#x}+{found.address:#x}, {where})"
    slot = ctypes.c_uint64.from_address(base + found.address)
    target = libc_function(FUNCTION)
    lazy = base + found.initial if found.kind == elfslot.JUMP_SLOT else None
    if target is None or slot.value not in (target, lazy):
        return f"{LIBRARY}'s getnameinfo slot holds {slot.value:#x}, not libc's" \
               f" ({target and hex(target)}) nor its own first value: another hook?"
    code = numeric_code(target)
    if isinstance(code, str):
        return code
    slot.value = code  # one aligned 8-byte store: a concurrent call sees old or new
    setattr(sys, _SET, (path, base, found.address, code))
    return None


def libc_function(name: bytes) -> int | None:
    """The address the loader gives ``name`` in this process's global scope."""
    with contextlib.suppress(AttributeError):
        return ctypes.cast(getattr(ctypes.CDLL(None), name.decode()), ctypes.c_void_p).value
    return None


def numeric_code(target: int) -> int | str:
    """The address of new machine code that calls getnameinfo at ``target`` with
    NI_NUMERICHOST added to its flags (in a page of its own, read and execute only,
    never freed: torch may call it until the process ends), or why there is none."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype, libc.mmap.argtypes = ctypes.c_void_p, [
        ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
        ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    page = libc.mmap(None, _PAGE, mmap.PROT_READ | mmap.PROT_WRITE,
                     mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    if page in (None, ctypes.c_void_p(-1).value):
        return f"no page for the code: {os.strerror(ctypes.get_errno())}"
    code = _CODE + struct.pack("<Q", target)
    ctypes.memmove(page, code, len(code))
    # Never writable and executable at once (a W^X policy may refuse that, and the
    # code need not change).
    if libc.mprotect(page, _PAGE, mmap.PROT_READ | mmap.PROT_EXEC) != 0:
        why = os.strerror(ctypes.get_errno())
        libc.munmap(page, _PAGE)
        return f"the code's page cannot be made executable: {why}"
    return page


class _PhdrInfo(ctypes.Structure):
    _fields_ = [("addr", ctypes.c_size_t), ("name", ctypes.c_char_p),
                ("phdr", ctypes.c_void_p), ("phnum", ctypes.c_uint16)]


_VISIT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_PhdrInfo), ctypes.c_size_t,
                          ctypes.c_void_p)


def loaded_objects(basename: str) -> dict[str, int]:
    """Every shared object of this process named ``basename``: its path -> its load
    address, as the dynamic loader reports them (dl_iterate_phdr)."""
    found: dict[str, int] = {}

    def visit(info, _size, _data):
        name = info.contents.name
        if name and os.path.basename(name) == basename.encode():
            found[os.fsdecode(name)] = info.contents.addr
        return 0

    libc = ctypes.CDLL(None)
    iterate = getattr(libc, "dl_iterate_phdr", None)
    if iterate is None:
        return {}
    iterate.argtypes, iterate.restype = [_VISIT, ctypes.c_void_p], ctypes.c_int
    iterate(_VISIT(visit), None)
    return found


def mappings() -> list[tuple[int, int, str, str]]:
    """This process's memory mappings: (start, end, permissions, path)."""
    out = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split(None, 5)
            start, end = (int(x, 16) for x in parts[0].split("-"))
            out.append((start, end, parts[1], parts[5].strip() if len(parts) > 5 else ""))
    return out


def mapping_of(maps, address: int, size: int) -> tuple[str, str] | None:
    """(permissions, path) of the one mapping that holds [address, address + size)."""
    for start, end, perms, path in maps:
        if start <= address and address + size <= end:
            return perms, path
    return None


def interface_of(addr: str) -> str | None:
    """The name of the network interface that holds ``addr`` (no lookup), or None."""
    try:
        wanted = ipaddress.ip_address(addr.split("%")[0])
    except ValueError:
        return None
    import psutil

    with contextlib.suppress(OSError):
        for name, entries in psutil.net_if_addrs().items():
            for entry in entries:
                with contextlib.suppress(ValueError):
                    if ipaddress.ip_address(entry.address.split("%")[0]) == wanted:
                        return name
    return None
