"""mwrun/lookups.py: libtorch's getnameinfo slot redirected to code that asks for
numbers, every guard that leaves it alone, the code itself (its arguments passed on, its
flags made numeric), and the interface that holds an address (gloo's device where
binding to the address failed). The parser of the library's tables, over damaged
copies, is tests/unit/test_elfslot.py; the job-wide proof (no process of a job asks a
nameserver) and torch's messages naming true peers are tests/integration/test_lookups.py."""

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

from mwrun import elfslot, lookups
from mwrun.worlds import backends

TORCH_LIB = Path(importlib.util.find_spec("torch").submodule_search_locations[0]) / "lib"
LIBTORCH = TORCH_LIB / lookups.LIBRARY
ON_X86_LINUX = sys.platform.startswith("linux") and platform.machine() == "x86_64"
needs_libtorch = pytest.mark.skipif(not (ON_X86_LINUX and LIBTORCH.exists()),
                                    reason="the slot is redirected on x86-64 Linux only")


def run(code: str) -> list:
    """Run ``code`` in a fresh interpreter; what it printed last, as a Python literal."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return eval(out.stdout.strip().splitlines()[-1])


@needs_libtorch
def test_a_process_redirects_the_slot_once_torch_is_loaded_and_keeps_it():
    code = """if True:
        import ctypes, sys
        from mwrun import elfslot, lookups
        before = lookups.numeric_only()
        import torch
        set_ = lookups.numeric_only()
        path, base, slot, code = sys._mwrun_numeric_only
        points = ctypes.c_uint64.from_address(base + slot).value == code
        again = lookups.numeric_only()
        for name in [m for m in sys.modules if m.startswith("mwrun")]:
            del sys.modules[name]  # what a warm child does: mwrun imported afresh
        from mwrun import lookups as fresh
        assert fresh is not lookups
        print([before, set_, points, again, fresh.numeric_only(), path])
    """
    before, set_, points, again, fresh, path = run(code)
    assert "not loaded" in before
    assert (set_, points, again, fresh) == (None, True, None, None)
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


@pytest.mark.parametrize("held, kind, reason", [
    ("libc", elfslot.JUMP_SLOT, None), ("first", elfslot.JUMP_SLOT, None),
    ("libc", elfslot.GLOB_DAT, None), ("first", elfslot.GLOB_DAT, "another hook"),
    ("other", elfslot.JUMP_SLOT, "another hook")])
def test_only_libcs_address_or_the_slots_first_value_is_replaced(monkeypatch, held, kind,
                                                                   reason):
    monkeypatch.setattr(lookups, "_done", False)
    monkeypatch.setattr(sys, lookups._SET, None, raising=False)  # and gone after
    memory = (ctypes.c_uint64 * 2)()  # the slot at 8
    base = ctypes.addressof(memory)
    values = {"libc": lookups.libc_function(lookups.FUNCTION), "first": base + 0x40,
              "other": 0x1234}
    memory[1] = values[held]
    asked = []
    monkeypatch.setattr(lookups, "loaded_objects", lambda name: {"/t/lib.so": base})
    monkeypatch.setattr(lookups.elfslot, "slot_in_file",
                        lambda path, name: elfslot.Slot(8, 0x40, kind))
    monkeypatch.setattr(lookups, "mapping_of", lambda maps, at, size: ("rw-p", "/t/lib.so"))
    monkeypatch.setattr(lookups, "numeric_code", lambda target: asked.append(target) or 0xC0DE)
    found = lookups.numeric_only()
    if reason is None:
        assert found is None and memory[1] == 0xC0DE and asked == [values["libc"]]
    else:
        assert reason in found and memory[1] == values[held] and asked == []
    assert lookups._done is (reason is None)


def test_other_files_are_refused(tmp_path):
    text = tmp_path / "not-elf"
    text.write_bytes(b"#!/bin/sh\n" + bytes(100))
    assert "not a 64-bit little-endian ELF" in elfslot.slot_in_file(str(text), lookups.FUNCTION)
    if LIBTORCH.exists():  # a library of torch's that does not call getnameinfo
        reason = elfslot.slot_in_file(str(TORCH_LIB / "libc10.so"), lookups.FUNCTION)
        assert isinstance(reason, str) and "not one slot" in reason
    stripped = tmp_path / "stripped.so"  # stripped: its dynamic tables are all it has
    if shutil.which("strip") and Path("/bin/true").exists():
        subprocess.run(["strip", "-o", str(stripped), "/bin/true"], check=True)
        assert "0 relocations" in elfslot.slot_in_file(str(stripped), lookups.FUNCTION)


NumericCall = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_char_p,
                               ctypes.c_uint, ctypes.c_char_p, ctypes.c_uint, ctypes.c_int)


@pytest.mark.skipif(not ON_X86_LINUX, reason="the code is x86-64")
def test_the_code_passes_every_argument_and_adds_numeric_to_the_flags():
    seen = []

    def getnameinfo(sa, salen, host, hostlen, serv, servlen, flags):
        seen.append((sa, salen, hostlen, servlen, flags))
        return 7

    target = NumericCall(getnameinfo)  # stands for libc's: it records what it got
    code = lookups.numeric_code(ctypes.cast(target, ctypes.c_void_p).value)
    assert isinstance(code, int), code
    call = NumericCall(code)
    host, serv = ctypes.create_string_buffer(8), ctypes.create_string_buffer(8)
    assert call(0x5A, 28, host, 1025, serv, 32, 2) == 7   # NI_NUMERICSERV
    assert call(0x5B, 16, host, 1025, serv, 32, 1 | 8) == 7  # already numeric
    assert seen == [(0x5A, 28, 1025, 32, 2 | lookups.NI_NUMERICHOST), (0x5B, 16, 1025, 32, 9)]
    # Its page can be run and read, never written.
    perms, _ = lookups.mapping_of(lookups.mappings(), code, 23)
    assert perms.startswith("r-x")


@pytest.mark.skipif(not ON_X86_LINUX, reason="the code is x86-64")
def test_the_code_calls_the_real_getnameinfo_numerically():
    code = lookups.numeric_code(lookups.libc_function(lookups.FUNCTION))
    assert isinstance(code, int), code
    # 127.0.0.1 as a sockaddr_in, port 29500: a name (localhost, from /etc/hosts)
    # asked for, a number answered.
    sockaddr = struct.pack("<H", 2) + struct.pack(">H", 29500) + bytes([127, 0, 0, 1]) + bytes(8)
    host, serv = ctypes.create_string_buffer(1025), ctypes.create_string_buffer(32)
    got = NumericCall(code)(ctypes.cast(ctypes.c_char_p(sockaddr), ctypes.c_void_p).value,
                            len(sockaddr), host, 1025, serv, 32, 2)
    assert (got, host.value, serv.value) == (0, b"127.0.0.1", b"29500")


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
