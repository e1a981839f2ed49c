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

torch stops looking up for good once one lookup failed: a function-static
``bool disable_getnameinfo`` in formatSockAddr (pytorch PR #159596) is set when
getnameinfo fails, and while it is set the peer is written with ``inet_ntop``
(``127.0.0.1:PORT``). ``numeric_only()`` sets that latch in this process, as a failed
lookup would have, before any store connection is made. The latch is a local symbol,
in no dynamic symbol table, so it is found in libtorch_cpu.so's own ELF symbol table
(the wheels ship it): its name, a 1-byte object in a writable section; the function's
machine code must read it (``cmpb $0x0, latch(%rip)``) and set it to 1 (``movb $0x1,
latch(%rip)``) and nothing else; the function's code in memory must match the file's
at the load address the dynamic loader reports (``dl_iterate_phdr``), and the latch's
byte must lie in a writable mapping of this process and hold 0 (or 1: already set).
Any doubt (not Linux, not x86-64, torch not loaded, a stripped or different library,
another value) and nothing is written: the reason is returned, and torch behaves as it
always did. Cost: some 30 ms, once per process (a search through the library's 76 MB
string table and two through its 13 MB symbol table, in the page cache); a warm child
inherits the set latch from its zygote, and what was found (kept on ``sys``): 0.2 ms.

Why this and not an LD_PRELOAD wrapper of getnameinfo that adds NI_NUMERICHOST (which
works as well on the wire): a wrapper is a compiled shared object, and mwrun is pure
Python with no compiler guaranteed where it runs, so it would ship binaries per
architecture and libc; it must be in the environment before a process starts, so it
cannot reach the running head, nor a script that imports mwrun by hand; it is
inherited by everything the job starts (compilers, ssh, the user's subprocesses) and
changes getnameinfo for all their code, where the latch changes one torch function
that only formats peers for messages; and it competes with other preloads (jemalloc,
profilers) for a variable a user may already set. The latch is torch's own switch,
flipped in the one process that asks, and checked before it is touched.

``interface_of(addr)``: the network interface that holds an address (gloo binds to it
by name, where naming the address failed, instead of resolving the node's host name).

Imports nothing of mwrun, and never torch (it only touches the library torch loaded);
psutil (for ``interface_of``).
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

LIBRARY = "libtorch_cpu.so"
LATCH = b"_ZZN4c10d6detail14formatSockAddrB5cxx11EPK8sockaddrjE19disable_getnameinfo"
FUNCTION = b"_ZN4c10d6detail14formatSockAddrB5cxx11EPK8sockaddrj"

_EM_X86_64 = 62
_SHT_SYMTAB, _SHT_NOBITS, _SHT_PROGBITS = 2, 8, 1
_SHF_WRITE, _SHF_ALLOC, _SHF_EXECINSTR = 1, 2, 4
_STT_OBJECT, _STT_FUNC = 1, 2
_EHDR, _SHDR, _SYM = struct.Struct("<16sHHIQQQIHHHHHH"), struct.Struct("<IIQQQQIIQQ"), \
    struct.Struct("<IBBHQQ")

_lock = threading.Lock()
# Where the latch was set in this process: (library path, load address, latch offset).
# Kept on ``sys``, which outlives this module: a warm child (host/child.py) imports
# mwrun afresh into a process whose library already has the latch set, and need not
# search the symbol table again.
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
            reason = _set_latch()
        except (OSError, ValueError, struct.error) as exc:  # a guard's read that failed
            reason = f"{type(exc).__name__}: {exc}"
        _done = reason is None
        return reason


def _set_latch() -> str | None:
    if not sys.platform.startswith("linux"):
        return f"not Linux ({sys.platform})"
    if platform.machine() != "x86_64":
        return f"the latch's code is checked on x86-64 only, this is {platform.machine()}"
    loaded = loaded_objects(LIBRARY)
    if not loaded:
        return f"{LIBRARY} is not loaded (torch not imported yet)"
    if len(loaded) > 1:
        return f"{LIBRARY} is loaded {len(loaded)} times: {sorted(loaded)}"
    (path, base), = loaded.items()
    done = getattr(sys, _SET, None)
    if done is not None and done[:2] == (path, base) and \
            ctypes.c_ubyte.from_address(base + done[2]).value == 1:
        return None  # set before, in this process or the one it was forked from
    found = find_latch(path)
    if isinstance(found, str):
        return found
    latch, function, code = found
    maps = mappings()
    where = mapping_of(maps, base + function, len(code))
    if where is None or "r" not in where[0] or \
            os.path.realpath(where[1]) != os.path.realpath(path):
        return f"{LIBRARY}'s code is not mapped where the loader says ({base:#x})"
    if ctypes.string_at(base + function, len(code)) != code:
        return f"{LIBRARY} in memory is not the file {path}"
    where = mapping_of(maps, base + latch, 1)
    if where is None or not where[0].startswith("rw"):
        return "the latch is not in writable memory"
    byte = ctypes.c_ubyte.from_address(base + latch)
    if byte.value not in (0, 1):
        return f"the latch holds {byte.value}, not a bool"
    byte.value = 1
    if byte.value != 1:
        return "the latch did not keep its value"
    setattr(sys, _SET, (path, base, latch))
    return None


def find_latch(path: str) -> tuple[int, int, bytes] | str:
    """(latch address, formatSockAddr's address, its code) relative to the library's
    load address, from the file; or why the file does not hold what is expected."""
    fd = os.open(path, os.O_RDONLY)
    try:
        header = _EHDR.unpack(os.pread(fd, _EHDR.size, 0))
        ident, machine, shoff, shentsize, shnum = header[0], header[2], header[6], \
            header[11], header[12]
        if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1:
            return f"{path} is not a 64-bit little-endian ELF file"
        if machine != _EM_X86_64:
            return f"{path} is not x86-64 code (e_machine {machine})"
        if shentsize != _SHDR.size or shnum == 0:
            return f"{path}: unexpected section headers"
        table = os.pread(fd, shnum * shentsize, shoff)
        sections = [_SHDR.unpack_from(table, i * shentsize) for i in range(shnum)]
        symtabs = [s for s in sections if s[1] == _SHT_SYMTAB]
        if len(symtabs) != 1 or not 0 < symtabs[0][6] < shnum:
            return f"{path} has no symbol table (stripped)"
        symtab, strtab = symtabs[0], sections[symtabs[0][6]]
        with _mapped(fd, strtab[4], strtab[5]) as (strings, at):
            names = name_offsets(strings, at, b"formatSockAddrB5cxx11EPK8sockaddrj")
        with _mapped(fd, symtab[4], symtab[5]) as (symbols, at):
            latch = symbol(symbols, at, names.get(LATCH, []))
            function = symbol(symbols, at, names.get(FUNCTION, []))
        if latch is None or function is None:
            return f"{path} has no formatSockAddr latch (another torch?)"
        why = _check_latch(latch, sections) or _check_function(function, sections)
        if why:
            return why
        text = sections[function[3]]
        code = os.pread(fd, function[5], text[4] + function[4] - text[3])
    finally:
        os.close(fd)
    why = check_code(code, function[4], latch[4])
    return why or (latch[4], function[4], code)


@contextlib.contextmanager
def _mapped(fd: int, offset: int, size: int):
    """The file's bytes [offset, offset + size) as (a read-only mapping, where they
    start in it); populated, so a search through them takes no page faults."""
    start = offset - offset % mmap.ALLOCATIONGRANULARITY
    flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
    with mmap.mmap(fd, size + offset - start, flags=flags, prot=mmap.PROT_READ,
                   offset=start) as m:
        yield m, offset - start


def name_offsets(data, base: int, part: bytes) -> dict[bytes, list[int]]:
    """Every name that contains ``part`` in the string table (NUL-terminated strings)
    at ``data[base:]``: name -> its offsets in the table."""
    found: dict[bytes, list[int]] = {}
    at = data.find(part, base)
    while at >= 0:
        start = data.rfind(b"\0", base, at) + 1 or base
        end = data.find(b"\0", at)
        end = len(data) if end < 0 else end
        found.setdefault(bytes(data[start:end]), []).append(start - base)
        at = data.find(part, end)
    return found


def symbol(data, base: int, names: list[int]):
    """The one ELF64 symbol in the table at ``data[base:]`` whose name is at one of the
    string table offsets ``names``: (st_name, st_info, st_other, st_shndx, st_value,
    st_size), or None where there is none or more than one."""
    found = []
    for name in names:
        key = struct.pack("<I", name)
        hit = data.find(key, base)
        while hit >= 0:
            if (hit - base) % _SYM.size == 0:
                found.append(_SYM.unpack_from(data, hit))
            hit = data.find(key, hit + 1)
    return found[0] if len(found) == 1 else None


def _check_latch(sym, sections) -> str | None:
    _, info, _, shndx, value, size = sym
    if info & 0xF != _STT_OBJECT or size != 1 or not 0 < shndx < len(sections):
        return f"the latch is not a 1-byte object (info {info:#x}, size {size})"
    _, kind, flags, addr, _, length, *_ = sections[shndx]
    if kind not in (_SHT_NOBITS, _SHT_PROGBITS) or flags & (_SHF_WRITE | _SHF_ALLOC) != \
            _SHF_WRITE | _SHF_ALLOC or flags & _SHF_EXECINSTR or \
            not addr <= value < addr + length:
        return "the latch is not in the library's writable data"
    return None


def _check_function(sym, sections) -> str | None:
    _, info, _, shndx, value, size = sym
    if info & 0xF != _STT_FUNC or not 0 < size < 1 << 16 or not 0 < shndx < len(sections):
        return f"formatSockAddr is not a function (info {info:#x}, size {size})"
    _, kind, flags, addr, _, length, *_ = sections[shndx]
    if kind != _SHT_PROGBITS or not flags & _SHF_EXECINSTR or \
            not (addr <= value and value + size <= addr + length):
        return "formatSockAddr is not in the library's code"
    return None


def check_code(code: bytes, address: int, latch: int) -> str | None:
    """Whether x86-64 ``code`` (at ``address``) uses the byte at ``latch`` as torch's
    latch: compared with 0 (``80 3d REL32 00``), set to 1 (``c6 05 REL32 01``), and
    written nothing else (RIP-relative: the target is the next instruction + REL32)."""
    reads, writes = 0, set()
    for opcode, op in ((b"\x80\x3d", "cmp"), (b"\xc6\x05", "mov")):
        at = code.find(opcode)
        while 0 <= at <= len(code) - 7:
            rel, = struct.unpack_from("<i", code, at + 2)
            if address + at + 7 + rel == latch:
                if op == "cmp" and code[at + 6] == 0:
                    reads += 1
                elif op == "mov":
                    writes.add(code[at + 6])
            at = code.find(opcode, at + 1)
    if not reads or writes != {1}:
        return f"formatSockAddr does not use the latch as expected ({reads} tests," \
               f" writes {sorted(writes)})"
    return None


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
