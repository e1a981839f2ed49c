"""Where a shared object keeps the address of a function it imports (its GOT slot),
read from the file the way the dynamic loader reads it: the ELF header, the program
headers, the dynamic section and the tables it points to. Never the section headers:
the loader does not read them, so a library whose section headers are damaged loads
and runs, and its slot is found all the same.

Every read is checked against the file's length and every field against what the
tables around it allow; whatever does not add up is answered with the reason (a
``str``), never an exception: a caller that writes only on a clear answer leaves a
damaged or unexpected file alone.

Imports nothing of mwrun.
"""

from __future__ import annotations

import mmap
import os
import struct
from typing import NamedTuple, Protocol

_EM_X86_64, _ET_DYN = 62, 3
_PT_LOAD, _PT_DYNAMIC = 1, 2
_PF_W = 2
_DT_NULL, _DT_PLTRELSZ, _DT_STRTAB, _DT_SYMTAB, _DT_RELA, _DT_RELASZ, _DT_RELAENT, \
    _DT_STRSZ, _DT_SYMENT, _DT_PLTREL, _DT_JMPREL = 0, 2, 5, 6, 7, 8, 9, 10, 11, 20, 23
GLOB_DAT, JUMP_SLOT = 6, 7  # R_X86_64_*: the relocations that fill a slot
_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_PHDR = struct.Struct("<IIQQQQQQ")  # type, flags, offset, vaddr, paddr, filesz, memsz, align
_DYN = struct.Struct("<qQ")
_SYM = struct.Struct("<IBBHQQ")
_RELA = struct.Struct("<QQq")  # r_offset, r_info (symbol << 32 | type), r_addend
_SLOT = struct.Struct("<Q")


class Slot(NamedTuple):
    """An imported function's slot: its address relative to the load address, the 8
    bytes the file holds there (a lazily bound slot's first value, before the loader
    adds the load address), and the relocation's type (JUMP_SLOT or GLOB_DAT)."""

    address: int
    initial: int
    kind: int


class Bytes(Protocol):
    """What is read: bytes, or a mapping of the file (both slice and search)."""

    def __len__(self) -> int: ...
    def __getitem__(self, index: slice) -> bytes: ...
    def find(self, sub: bytes, start: int = ..., end: int = ...) -> int: ...


class _Doubt(Exception):
    """What does not add up, raised where it is seen and answered as its reason."""


class _Image:
    """The file's bytes (its first ``size``); every read checked against them."""

    def __init__(self, data: Bytes, size: int) -> None:
        self.data, self.size = data, size

    def read(self, offset: int, size: int, what: str) -> bytes:
        self.check(offset, size, what)
        return bytes(self.data[offset:offset + size])

    def check(self, offset: int, size: int, what: str) -> None:
        if offset < 0 or size < 0 or offset + size > self.size:
            raise _Doubt(f"{what} lies outside the file ({offset:#x}+{size:#x})")

    def find(self, needle: bytes, start: int, end: int) -> int:
        return self.data.find(needle, start, min(end, self.size))


def slot_in_file(path: str, name: bytes) -> Slot | str:
    """The slot of ``path``'s import of function ``name``, or why there is no clear one."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return f"{path} is empty"
        # Not populated: only the pages of the tables searched are read.
        with mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ) as data:
            return slot_of(data, name, size, path)
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    finally:
        os.close(fd)


def slot_of(data: Bytes, name: bytes, size: int | None = None,
            what: str = "the file") -> Slot | str:
    """The slot of the import of ``name`` in the ELF file held by ``data`` (its first
    ``size`` bytes), or why there is no clear one."""
    image = _Image(data, len(data) if size is None else min(size, len(data)))
    try:
        loads, dynamic = _segments(image, what)
        tables = _tables(image, loads, dynamic)
        return _find(image, loads, tables, name)
    except _Doubt as doubt:
        return f"{what}: {doubt}"


def _segments(image: _Image, what: str) -> tuple[list[tuple], tuple]:
    """The loadable segments and the one dynamic segment, from the program headers."""
    header = _EHDR.unpack(image.read(0, _EHDR.size, "the ELF header"))
    ident, kind, machine, phoff, phentsize, phnum = header[0], header[1], header[2], \
        header[5], header[9], header[10]
    if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1:
        raise _Doubt("not a 64-bit little-endian ELF file")
    if machine != _EM_X86_64 or kind != _ET_DYN:
        raise _Doubt(f"not an x86-64 shared object (e_machine {machine}, e_type {kind})")
    if phentsize != _PHDR.size or not 0 < phnum < 0xFFFF:
        raise _Doubt(f"unexpected program headers ({phnum} of {phentsize} bytes)")
    table = image.read(phoff, phnum * phentsize, "the program headers")
    headers = [_PHDR.unpack_from(table, i * phentsize) for i in range(phnum)]
    loads = [h for h in headers if h[0] == _PT_LOAD]
    dynamics = [h for h in headers if h[0] == _PT_DYNAMIC]
    for load in loads:
        image.check(load[2], load[5], "a loadable segment")
        if load[5] > load[6]:
            raise _Doubt("a loadable segment holds more of the file than of memory")
    if not loads or len(dynamics) != 1:
        raise _Doubt(f"{len(loads)} loadable and {len(dynamics)} dynamic segments")
    return loads, dynamics[0]


def _tables(image: _Image, loads: list[tuple], dynamic: tuple) -> dict[int, int]:
    """The dynamic section's entries (tag -> value) that locate the tables."""
    raw = image.read(dynamic[2], dynamic[5] - dynamic[5] % _DYN.size, "the dynamic section")
    tables: dict[int, int] = {}
    wanted = {_DT_PLTRELSZ, _DT_STRTAB, _DT_SYMTAB, _DT_RELA, _DT_RELASZ, _DT_RELAENT,
              _DT_STRSZ, _DT_SYMENT, _DT_PLTREL, _DT_JMPREL}
    for tag, value in _DYN.iter_unpack(raw):
        if tag == _DT_NULL:
            break
        if tag in wanted:
            if tag in tables:
                raise _Doubt(f"the dynamic section names tag {tag} twice")
            tables[tag] = value
    if not {_DT_STRTAB, _DT_STRSZ, _DT_SYMTAB} <= tables.keys() or \
            tables.get(_DT_SYMENT, _SYM.size) != _SYM.size or \
            tables.get(_DT_RELAENT, _RELA.size) != _RELA.size or \
            tables.get(_DT_PLTREL, _DT_RELA) != _DT_RELA:
        raise _Doubt("no dynamic symbol table, or tables of unexpected entries")
    return tables


def _offset(image: _Image, loads: list[tuple], vaddr: int, size: int, what: str) -> int:
    """Where the ``size`` bytes the loader maps at ``vaddr`` are in the file."""
    for _, _, offset, start, _, filesz, _, _ in loads:
        if start <= vaddr and vaddr + size <= start + filesz:
            image.check(offset + vaddr - start, size, what)
            return offset + vaddr - start
    raise _Doubt(f"{what} is not in the file's loadable segments ({vaddr:#x}+{size:#x})")


def _find(image: _Image, loads: list[tuple], tables: dict[int, int], name: bytes) -> Slot:
    strings = _offset(image, loads, tables[_DT_STRTAB], tables[_DT_STRSZ], "the string table")
    end = strings + tables[_DT_STRSZ]
    # A name is the string from its offset to the next NUL: a longer name that ends in
    # ``name`` (tail-merged) holds it too.
    names, at = set(), image.find(name + b"\0", strings, end)
    while at >= 0:
        names.add(at - strings)
        at = image.find(name + b"\0", at + 1, end)
    symbols = _symbols(image, loads, tables, names)
    refs = _relocations(image, loads, tables, symbols)
    if len(refs) != 1 or refs[0][1] & 0xFFFFFFFF not in (GLOB_DAT,
                                                         JUMP_SLOT):
        kinds = sorted(r[1] & 0xFFFFFFFF for r in refs)
        raise _Doubt(f"{name.decode()} is imported by {len(refs)} relocations {kinds},"
                     " not one slot")
    address, info, _ = refs[0]
    if address % _SLOT.size:
        raise _Doubt(f"{name.decode()}'s slot {address:#x} is not aligned")
    for _, flags, offset, start, _, filesz, memsz, _ in loads:
        if flags & _PF_W and start <= address and address + _SLOT.size <= start + memsz:
            initial = 0 if address + _SLOT.size > start + filesz else _SLOT.unpack(
                image.read(offset + address - start, _SLOT.size, "the slot"))[0]
            return Slot(address, initial, info & 0xFFFFFFFF)
    raise _Doubt(f"{name.decode()}'s slot {address:#x} is not in writable memory")


def _symbols(image: _Image, loads: list[tuple], tables: dict[int, int],
             names: set[int]) -> set[int]:
    """The indices of the dynamic symbols named at string table offsets ``names``. The
    table's length is nowhere in the dynamic section: it is searched up to the string
    table (where linkers put it) or its segment's end; a match past its true end is
    named by no relocation, so it changes nothing."""
    start = tables[_DT_SYMTAB]
    limit = max((s + f for _, _, _, s, _, f, _, _ in loads if s <= start < s + f), default=0)
    if tables[_DT_STRTAB] > start:
        limit = min(limit, tables[_DT_STRTAB])
    count = max(limit - start, 0) // _SYM.size
    base = _offset(image, loads, start, count * _SYM.size, "the symbol table")
    found = set()
    for name in names:
        key = struct.pack("<I", name)
        hit = image.find(key, base, base + count * _SYM.size)
        while hit >= 0:
            if (hit - base) % _SYM.size == 0:
                found.add((hit - base) // _SYM.size)
            hit = image.find(key, hit + 1, base + count * _SYM.size)
    found.discard(0)  # the null symbol: its name is nothing
    return found


def _relocations(image: _Image, loads: list[tuple], tables: dict[int, int],
                 symbols: set[int]) -> list[tuple[int, int, int]]:
    """Every relocation, of any type, in either table, that names one of ``symbols``."""
    refs = []
    for table, size in ((_DT_JMPREL, _DT_PLTRELSZ), (_DT_RELA, _DT_RELASZ)):
        if table not in tables:
            continue
        length = tables.get(size, 0)
        if length % _RELA.size:
            raise _Doubt(f"a relocation table of {length} bytes")
        base = _offset(image, loads, tables[table], length, "a relocation table")
        for index in sorted(symbols):
            # The symbol in the high half of r_info, whatever the type in the low half.
            key = struct.pack("<I", index)
            hit = image.find(key, base, base + length)
            while hit >= 0:
                if (hit - base) % _RELA.size == 12:
                    refs.append(_RELA.unpack(image.read(hit - 12, _RELA.size, "a relocation")))
                hit = image.find(key, hit + 1, base + length)
    return refs
