"""mwrun/lookups.py: torch's reverse-lookup latch found in the installed libtorch and set,
every guard that leaves it alone, and the interface that holds an address (gloo's
device where binding to the address failed). The job-wide proof (no process of a job
asks a nameserver) is tests/integration/test_lookups.py."""

import ctypes
import importlib.util
import platform
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import psutil
import pytest

from mwrun import lookups
from mwrun.worlds import backends

TORCH_LIB = Path(importlib.util.find_spec("torch").submodule_search_locations[0]) / "lib"
LIBTORCH = TORCH_LIB / lookups.LIBRARY
ON_X86_LINUX = sys.platform.startswith("linux") and platform.machine() == "x86_64"
needs_libtorch = pytest.mark.skipif(not (ON_X86_LINUX and LIBTORCH.exists()),
                                    reason="the latch is checked on x86-64 Linux only")


def run(code: str) -> list:
    """Run ``code`` in a fresh interpreter; what it printed last, as a Python literal."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return eval(out.stdout.strip().splitlines()[-1])


@needs_libtorch
def test_the_installed_libtorch_has_the_latch_where_its_code_uses_it():
    found = lookups.find_latch(str(LIBTORCH))
    assert not isinstance(found, str), found
    latch, function, code = found
    assert latch != function and len(code) > 16
    assert lookups.check_code(code, function, latch) is None
    # The symbol table agrees: one byte in .bss, and a function.
    listing = subprocess.run(["readelf", "-sW", str(LIBTORCH)], capture_output=True,
                             text=True).stdout if shutil.which("readelf") else ""
    if listing:
        [row] = [r.split() for r in listing.splitlines()
                 if r.endswith(" " + lookups.LATCH.decode())]
        assert int(row[1], 16) == latch and row[2:4] == ["1", "OBJECT"]


@needs_libtorch
def test_a_process_sets_the_latch_once_torch_is_loaded_and_keeps_it():
    code = """if True:
        import ctypes, sys
        from mwrun import lookups
        before = lookups.numeric_only()
        import torch
        set_ = lookups.numeric_only()
        path, base, latch = sys._mwrun_numeric_only
        value = ctypes.c_ubyte.from_address(base + latch).value
        again = lookups.numeric_only()
        for name in [m for m in sys.modules if m.startswith("mwrun")]:
            del sys.modules[name]  # what a warm child does: mwrun imported afresh
        from mwrun import lookups as fresh
        assert fresh is not lookups
        print([before, set_, value, again, fresh.numeric_only(), path])
    """
    before, set_, value, again, fresh, path = run(code)
    assert "not loaded" in before
    assert (set_, value, again, fresh) == (None, 1, None, None)
    assert Path(path).resolve() == LIBTORCH.resolve()


def test_importing_it_imports_no_torch():
    assert run("import sys, mwrun.lookups\nprint(['torch' in sys.modules])") == [False]


def test_it_does_nothing_where_it_cannot_check(monkeypatch):
    monkeypatch.setattr(lookups, "_done", False)
    monkeypatch.setattr(sys, "platform", "darwin")
    assert lookups.numeric_only() == "not Linux (darwin)"
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    assert "x86-64 only" in lookups.numeric_only()
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(lookups, "loaded_objects", lambda name: {})
    assert "not loaded" in lookups.numeric_only()
    monkeypatch.setattr(lookups, "loaded_objects", lambda name: {"/a/x.so": 1, "/b/x.so": 2})
    assert "loaded 2 times" in lookups.numeric_only()
    assert lookups._done is False


@needs_libtorch
def test_a_library_in_memory_unlike_its_file_is_left_alone(monkeypatch):
    monkeypatch.setattr(lookups, "_done", False)
    monkeypatch.setattr(sys, lookups._SET, None, raising=False)  # and gone after
    # The loader says libtorch is where libc is: what is there is not formatSockAddr.
    [libc] = lookups.loaded_objects("libc.so.6").values()
    monkeypatch.setattr(lookups, "loaded_objects", lambda name: {str(LIBTORCH): libc})
    reason = lookups.numeric_only()
    assert reason is not None and ("not mapped where the loader says" in reason
                                   or "is not the file" in reason), reason


@pytest.mark.parametrize("value, reason, after", [
    (0, None, 1), (1, None, 1), (7, "the latch holds 7, not a bool", 7)])
def test_only_a_bool_is_set(monkeypatch, value, reason, after):
    monkeypatch.setattr(lookups, "_done", False)
    monkeypatch.setattr(sys, lookups._SET, None, raising=False)  # and gone after
    memory = ctypes.create_string_buffer(b"CODE" + bytes([value]))
    base = ctypes.addressof(memory)
    monkeypatch.setattr(lookups, "loaded_objects", lambda name: {"/t/lib.so": base})
    monkeypatch.setattr(lookups, "find_latch", lambda path: (4, 0, b"CODE"))
    monkeypatch.setattr(lookups, "mapping_of", lambda maps, at, size: ("rw-p", "/t/lib.so"))
    assert lookups.numeric_only() == reason
    assert memory.raw[4] == after
    assert lookups._done is (reason is None)


def test_other_files_are_refused(tmp_path):
    text = tmp_path / "not-elf"
    text.write_bytes(b"#!/bin/sh\n" + bytes(100))
    assert "not a 64-bit little-endian ELF" in lookups.find_latch(str(text))
    if LIBTORCH.exists():  # a library of torch's without the latch
        reason = lookups.find_latch(str(TORCH_LIB / "libc10.so"))
        assert isinstance(reason, str) and ("no formatSockAddr latch" in reason
                                            or "no symbol table" in reason)
    stripped = tmp_path / "stripped.so"
    if shutil.which("strip") and Path("/bin/true").exists():
        subprocess.run(["strip", "-o", str(stripped), "/bin/true"], check=True)
        assert "no symbol table" in lookups.find_latch(str(stripped))


def _code(*instructions: tuple[bytes, int, int]) -> bytes:
    """x86-64 RIP-relative byte instructions (opcode, target, immediate) laid end to end
    from address 0x1000, as formatSockAddr's are."""
    out = b""
    for opcode, target, imm in instructions:
        out += opcode + struct.pack("<i", target - (0x1000 + len(out) + 7)) + bytes([imm])
    return out


def test_the_code_must_test_the_latch_and_set_it_to_one_and_nothing_else():
    cmp, mov, latch = b"\x80\x3d", b"\xc6\x05", 0x9000
    assert lookups.check_code(_code((cmp, latch, 0), (mov, latch, 1)), 0x1000, latch) is None
    assert lookups.check_code(_code((cmp, latch, 0)), 0x1000, latch) is not None
    assert lookups.check_code(_code((mov, latch, 1)), 0x1000, latch) is not None
    assert lookups.check_code(_code((cmp, latch, 0), (mov, latch, 1), (mov, latch, 2)),
                              0x1000, latch) is not None
    # The same instructions aimed at another byte say nothing of the latch.
    assert lookups.check_code(_code((cmp, latch + 8, 0), (mov, latch + 8, 1)), 0x1000,
                              latch) is not None


def _table(names: list[bytes]) -> tuple[bytes, list[int]]:
    table, offsets = b"\0", []
    for name in names:
        offsets.append(len(table))
        table += name + b"\0"
    return table, offsets


def test_names_and_symbols_are_found_exactly():
    table, offsets = _table([b"zero", b"_Z1fv.cold", b"_ZZ1fvE5latch", b"_Z1fv"])
    found = lookups.name_offsets(b"pad" + table, 3, b"1fv")
    assert found == {b"_Z1fv.cold": [offsets[1]], b"_ZZ1fvE5latch": [offsets[2]],
                     b"_Z1fv": [offsets[3]]}
    sym = struct.Struct("<IBBHQQ")
    one = sym.pack(offsets[2], 1, 0, 5, 0x9000, 1)
    # A value that equals the name's offset elsewhere in an entry is not a name.
    other = sym.pack(7, 2, 0, 3, offsets[2], 64)
    symbols = b"xx" + other + one
    assert lookups.symbol(symbols, 2, [offsets[2]]) == (offsets[2], 1, 0, 5, 0x9000, 1)
    assert lookups.symbol(symbols, 2, [offsets[0]]) is None  # none
    assert lookups.symbol(symbols + one, 2, [offsets[2]]) is None  # two: doubt


def test_the_latch_must_be_a_byte_of_writable_data():
    write_alloc, code = 3, 6
    sections = [(0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
                (0, 8, write_alloc, 0x9000, 0, 0x100, 0, 0, 0, 0),   # .bss
                (0, 1, code, 0x1000, 0x1000, 0x100, 0, 0, 0, 0)]    # .text
    assert lookups._check_latch((1, 1, 0, 1, 0x9010, 1), sections) is None
    assert lookups._check_latch((1, 1, 0, 1, 0x9010, 4), sections) is not None  # size
    assert lookups._check_latch((1, 2, 0, 1, 0x9010, 1), sections) is not None  # a function
    assert lookups._check_latch((1, 1, 0, 2, 0x1010, 1), sections) is not None  # in code
    assert lookups._check_latch((1, 1, 0, 1, 0x9200, 1), sections) is not None  # outside
    assert lookups._check_function((1, 2, 0, 2, 0x1010, 32), sections) is None
    assert lookups._check_function((1, 2, 0, 1, 0x9010, 32), sections) is not None
    assert lookups._check_function((1, 2, 0, 2, 0x10f0, 32), sections) is not None


def test_the_interface_that_holds_an_address():
    loopback = next((name for name, entries in psutil.net_if_addrs().items()
                     if any(e.address == "127.0.0.1" for e in entries)), None)
    if loopback is None:
        pytest.skip("no interface holds 127.0.0.1 here")
    assert lookups.interface_of("127.0.0.1") == loopback
    assert lookups.interface_of("192.0.2.254") is None  # TEST-NET-1: no one's
    assert lookups.interface_of("not-an-address") is None


class FailingGloo:
    """ProcessGroupGloo's device constructors, failing as told; what was asked, kept."""

    fail: ClassVar[tuple] = ()
    asked: ClassVar[list] = []

    @classmethod
    def create_device(cls, hostname=None, interface=None):
        how = ("hostname", hostname) if hostname is not None else ("interface", interface)
        cls.asked.append(how)
        if how[0] in cls.fail:
            raise RuntimeError(f"no device on {how[1]}")
        return f"device@{how[1]}"

    @classmethod
    def create_default_device(cls):
        cls.asked.append(("default", None))
        return "device@default"


@pytest.mark.parametrize("fail, device", [
    ((), "device@127.0.0.1"),
    (("hostname",), "device@LOOPBACK"),
    (("hostname", "interface"), "device@default"),
])
def test_gloo_binds_to_the_address_else_its_interface_and_only_then_resolves(
        monkeypatch, fail, device):
    monkeypatch.setattr(FailingGloo, "fail", fail)
    monkeypatch.setattr(FailingGloo, "asked", [])
    monkeypatch.setattr(lookups, "interface_of", lambda addr: "LOOPBACK"
                        if addr == "127.0.0.1" else None)
    made, _ = backends.gloo_device(FailingGloo, "127.0.0.1")
    assert made == device
    kinds = [kind for kind, _ in FailingGloo.asked]
    assert kinds == ["hostname", "interface", "default"][:len(fail) + 1]


def test_gloo_without_an_interface_for_the_address_takes_the_default(monkeypatch):
    monkeypatch.setattr(FailingGloo, "fail", ("hostname",))
    monkeypatch.setattr(FailingGloo, "asked", [])
    made, _ = backends.gloo_device(FailingGloo, "192.0.2.254")
    assert made == "device@default"
    assert [kind for kind, _ in FailingGloo.asked] == ["hostname", "default"]
