"""Topologies from an unkind user: every mistake a positioned error, nothing rewritten."""

import textwrap

import pytest

from mwrun.errors import TopologyError
from mwrun.plan.topology import parse


def parsed(text: str):
    return parse(textwrap.dedent(text), "t.yaml", "/base")


def problems(text: str) -> list[str]:
    with pytest.raises(TopologyError) as info:
        parsed(text)
    return [str(d) for d in info.value.diagnostics]


def with_env(env: str) -> str:
    return ("version: 1\nprocesses:\n  a:\n    cmd: run a\n    env:\n"
            + textwrap.indent(textwrap.dedent(env), "      ")
            + "worlds:\n  w:\n    members: [a]\n")


def test_env_values_keep_the_text_as_written():
    topo = parsed(with_env("""\
        OCT: 010
        HEX: 0x10
        VERSION: 1.10
        TIME: 12:30
        BIG: 1_000
        EXP: 1e3
        DATE: 2024-01-02 10:00:00
        QUOTED: "010"
        EMPTY:
        WORD: plain
        """))
    assert topo.processes["a"].env == {
        "OCT": "010", "HEX": "0x10", "VERSION": "1.10", "TIME": "12:30", "BIG": "1_000",
        "EXP": "1e3", "DATE": "2024-01-02 10:00:00", "QUOTED": "010", "EMPTY": "",
        "WORD": "plain"}


def test_env_booleans_still_ask_for_quotes():
    [found] = problems(with_env("DEBUG: yes\n"))
    assert found.startswith("t.yaml:6:14:") and "in quotes" in found
