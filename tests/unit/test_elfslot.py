"""mwrun/elfslot.py over damaged copies of the installed libtorch_cpu.so: truncated at
many offsets, bytes flipped in the ELF header, the program headers, the dynamic
section, the tables they locate, the section headers and their string table, fields set
out of range. The parser answers the library's true slot or a reason (the caller then
leaves torch as it was), and never raises; what the loader never reads (the section
headers) changes nothing. The file is mapped once; a damaged copy is a view of it with
a few bytes changed (``Damaged``), so no case copies the library."""

import mmap
import random
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from mwrun import elfslot, lookups
from tests.unit.test_lookups import LIBTORCH, needs_libtorch

NAME = lookups.FUNCTION
EHDR, PHDR, DYN, RELA = struct.Struct("<16sHHIQQQIHHHHHH"), struct.Struct("<IIQQQQQQ"), \
    struct.Struct("<qQ"), struct.Struct("<QQq")
HUGE = (0, 1, 0xFFFF, 1 << 63, (1 << 64) - 1)
# The dynamic section's entries that locate the tables (the others are not read).
TAGS = (2, 5, 6, 7, 8, 9, 10, 11, 20, 23)


class Damaged:
    """The library's bytes with some changed (offset -> byte): slices and searches see
    the changes, and only a search through changed bytes copies the range it reads."""

    def __init__(self, data, patches: dict[int, int]) -> None:
        self.data, self.patches = data, patches

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, part: slice) -> bytes:
        start, stop, _ = part.indices(len(self))
        out = bytearray(self.data[start:stop])
        for at, byte in self.patches.items():
            if start <= at < stop:
                out[at - start] = byte
        return bytes(out)

    def find(self, sub: bytes, start: int = 0, end: int | None = None) -> int:
        end = len(self) if end is None else min(end, len(self))
        if not any(start - len(sub) < at < end for at in self.patches):
            return self.data.find(sub, start, end)
        hit = self[start:end].find(sub)
        return -1 if hit < 0 else start + hit


def patch(at: int, raw: bytes) -> dict[int, int]:
    return {at + i: b for i, b in enumerate(raw)}


@pytest.fixture(scope="module")
def library():
    """The mapped library, its true slot, and where its structures lie in the file."""
    if not LIBTORCH.exists():
        pytest.skip("torch's library is not installed")
    with LIBTORCH.open("rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as data:
        truth = elfslot.slot_of(data, NAME)
        assert isinstance(truth, elfslot.Slot), truth
        yield data, truth, Layout(data, truth)


class Layout:
    """Where the header, program headers, dynamic section, tables and section headers
    of the real library are, read here independently of the parser (the real file's
    own section headers are intact)."""

    def __init__(self, data, truth: elfslot.Slot) -> None:
        header = EHDR.unpack_from(data, 0)
        self.phoff, self.phnum, self.shoff, self.shnum = header[5], header[10], \
            header[6], header[12]
        self.phdrs = [PHDR.unpack_from(data, self.phoff + i * PHDR.size)
                      for i in range(self.phnum)]
        dynamic = next(p for p in self.phdrs if p[0] == 2)
        self.dynamic = (dynamic[2], dynamic[5])
        self.entries = {DYN.unpack_from(data, dynamic[2] + i * DYN.size)[0]:
                        dynamic[2] + i * DYN.size for i in range(dynamic[5] // DYN.size)}
        sections = [struct.unpack_from("<IIQQQQIIQQ", data, self.shoff + i * 64)
                    for i in range(self.shnum)]
        self.shstrtab = (sections[header[13]][4], sections[header[13]][5])
        jmprel = next(s for s in sections if s[1] == 4 and s[7] != 0)  # .rela.plt
        at = jmprel[4]
        while RELA.unpack_from(data, at)[0] != truth.address:
            at += RELA.size
        self.relocation = at
        writable = next(p for p in self.phdrs if p[0] == 1 and p[1] & 2
                        and p[3] <= truth.address < p[3] + p[5])
        self.writable_phdr = self.phoff + self.phdrs.index(writable) * PHDR.size
        self.slot = writable[2] + truth.address - writable[3]
        symbol = RELA.unpack_from(data, at)[1] >> 32
        symtab = next(s for s in sections if s[1] == 11)  # SHT_DYNSYM
        self.symbol = symtab[4] + symbol * 24
        self.name = sections[symtab[6]][4] + struct.unpack_from("<I", data, self.symbol)[0]

    def answer_bytes(self) -> set[int]:
        """The bytes that say what the slot is (its relocation's offset and type, the
        slot's first value, the writable segment that holds it): damage there may name
        another slot, as the loader then would."""
        return set(range(self.relocation, self.relocation + 12)) | \
            set(range(self.slot, self.slot + 8)) | \
            set(range(self.writable_phdr, self.writable_phdr + PHDR.size))


def answer(data, patches: dict[int, int], size: int | None = None):
    found = elfslot.slot_of(Damaged(data, patches) if patches else data, NAME, size)
    assert isinstance(found, elfslot.Slot | str)
    return found


@needs_libtorch
def test_the_slot_is_the_one_readelf_names(library):
    _, truth, _ = library
    if shutil.which("readelf") is None:
        pytest.skip("no readelf")
    rows = [r.split() for r in subprocess.run(
        ["readelf", "-rW", str(LIBTORCH)], capture_output=True, text=True).stdout.splitlines()
        if r.split()[-3:-2] == ["getnameinfo@GLIBC_2.2.5"]]
    assert [(int(r[0], 16), r[2]) for r in rows] == [(truth.address, "R_X86_64_JUMP_SLOT")]
    assert truth.kind == elfslot.JUMP_SLOT


@needs_libtorch
def test_a_truncated_library_is_refused_never_misread(library):
    data, truth, layout = library
    ends = sorted({layout.phoff + layout.phnum * PHDR.size, sum(layout.dynamic),
                   layout.relocation + RELA.size, layout.slot + 8, layout.name + len(NAME),
                   layout.symbol + 24, max(p[2] + p[5] for p in layout.phdrs if p[0] == 1)})
    cuts = {0, 1, 15, 16, 63, 64, 65, layout.phoff + 55} | {e + d for e in ends for d in
                                                           (-1, 0, 1)}
    rng = random.Random(36)
    cuts |= {rng.randrange(len(data)) for _ in range(12)}
    for size in sorted(cuts):
        found = answer(data, {}, size)
        assert found == truth or isinstance(found, str), (size, found)
    # Cut anywhere inside a structure that is read: refused.
    for end in ends:
        assert isinstance(answer(data, {}, end - 1), str), end
    assert answer(data, {}, len(data)) == truth


@needs_libtorch
def test_section_headers_out_of_range_change_nothing(library):
    """The issue's library: section headers the loader never reads, out of range."""
    data, truth, layout = library
    fields = {"e_shoff": (0x28, "<Q"), "e_shentsize": (0x3A, "<H"), "e_shnum": (0x3C, "<H"),
              "e_shstrndx": (0x3E, "<H")}
    for name, (at, fmt) in fields.items():
        for value in HUGE:
            value &= (1 << (8 * struct.calcsize(fmt))) - 1
            assert answer(data, patch(at, struct.pack(fmt, value))) == truth, (name, value)
    rng = random.Random(3600)
    table = range(layout.shoff, layout.shoff + layout.shnum * 64)
    strings = range(layout.shstrtab[0], sum(layout.shstrtab))
    for _ in range(16):
        patches = {rng.choice(table): rng.randrange(256) for _ in range(rng.randint(1, 8))}
        patches |= {rng.choice(strings): rng.randrange(256)}
        assert answer(data, patches) == truth, patches
    # sh_offset and sh_size past the file: every section's at once, and a few alone.
    beyond = [patch(layout.shoff + i * 64 + 0x18, struct.pack("<QQ", len(data), 1 << 62))
              for i in range(layout.shnum)]
    for patches in [{k: v for p in beyond for k, v in p.items()}, *rng.sample(beyond, 4)]:
        assert answer(data, patches) == truth


@needs_libtorch
def test_fields_the_loader_reads_out_of_range_are_refused(library):
    data, truth, layout = library
    cases = [patch(at, struct.pack(fmt, value & ((1 << (8 * struct.calcsize(fmt))) - 1)))
             for at, fmt in ((0x20, "<Q"), (0x36, "<H"), (0x38, "<H"), (0x10, "<H"),
                             (0x12, "<H"), (0x04, "<B"), (0x05, "<B"))
             for value in HUGE]
    for i, phdr in enumerate(layout.phdrs):  # p_offset, p_vaddr, p_filesz, p_memsz
        if phdr[0] in (1, 2) or i == 0:  # the segments read, and one that is not
            cases += [patch(layout.phoff + i * PHDR.size + field, struct.pack("<Q", value))
                      for field in (8, 16, 32, 40) for value in HUGE]
    for tag in TAGS:  # the tables' addresses and sizes
        cases += [patch(layout.entries[tag] + 8, struct.pack("<Q", value)) for value in HUGE]
    cases += [patch(layout.relocation, struct.pack("<QQ", value, value)) for value in HUGE]
    cases += [patch(layout.symbol, struct.pack("<I", value & 0xFFFFFFFF)) for value in HUGE]
    answers = set()
    for patches in cases:
        found = answer(data, patches)
        if not set(patches) & layout.answer_bytes():
            assert found == truth or isinstance(found, str), (patches, found)
        answers.add(found == truth)
    assert answers == {True, False}  # some damage is harmless, some refused


@needs_libtorch
def test_flipped_bytes_anywhere_the_loader_reads_are_refused_or_harmless(library):
    data, truth, layout = library
    areas = [range(0, 64), range(layout.phoff, layout.phoff + layout.phnum * PHDR.size),
             range(layout.dynamic[0], sum(layout.dynamic)),
             range(layout.relocation - 48, layout.relocation + 72),
             range(layout.symbol - 24, layout.symbol + 48),
             range(layout.name - 8, layout.name + len(NAME) + 8),
             range(layout.slot - 8, layout.slot + 16)]
    rng = random.Random(1959)
    for area in areas:
        for _ in range(8):
            patches = {}
            for at in rng.sample(area, rng.randint(1, 3)):
                patches[at] = data[at] ^ (1 << rng.randrange(8))
            found = answer(data, patches)
            if not set(patches) & layout.answer_bytes():
                assert found == truth or isinstance(found, str), (patches, found)


def test_what_is_not_an_x86_64_shared_object_is_refused(tmp_path):
    for raw, why in [(b"", "empty"), (b"#!/bin/sh\n" + bytes(100), "not a 64-bit"),
                     (b"\x7fELF\x02\x01" + bytes(10), "lies outside the file"),
                     (b"\x7fELF\x01\x01" + bytes(80), "not a 64-bit")]:
        path = tmp_path / "lib.so"
        path.write_bytes(raw)
        found = elfslot.slot_in_file(str(path), NAME)
        assert isinstance(found, str) and why in found, (raw[:8], found)
    assert "No such file" in elfslot.slot_in_file(str(tmp_path / "gone.so"), NAME)
    assert isinstance(elfslot.slot_in_file(str(tmp_path), NAME), str)  # a directory
    if Path("/bin/true").exists():  # an executable that imports no getnameinfo
        assert "0 relocations" in elfslot.slot_in_file("/bin/true", NAME)
