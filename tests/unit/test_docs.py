"""The pages of docs/ (and README.rst) against the code, where they show commands and
topologies: every ``mwrun`` command a literal block shows parses as the command line
would parse it (a real command, real options, values of the right kind); every command
the text mentions, and every row of the command table, names a real command and only
its real options; every topology snippet parses with mwrun's own parser; the topology
page names every key the parser takes, the library page every variable a launched
process receives; the sbatch script is a shell script whose node
count is its topology's host count. Pages are read as tests/docpages.py reads them."""

from __future__ import annotations

import re
import shlex
import subprocess

import click
import pytest
import yaml

from mwrun.cli import main
from mwrun.plan.environment import launch_spec
from mwrun.plan.hosts import _HOST_KEYS
from mwrun.plan.inventory import HostInventory
from mwrun.plan.placement import place
from mwrun.plan.processes import _PROCESS_KEYS, _SCALE_KEYS
from mwrun.plan.templates import _WORLD_KEYS
from mwrun.plan.topology import _TOP_KEYS, load, parse
from tests.docpages import PAGES, commands, literal_blocks, sections, synopsis_rows, table_rows
from tests.helpers import ROOT

# An option as a synopsis writes it: after a space or a "[" (not "PROCESS=N|-K").
OPTION = re.compile(r"(?<![^\s\[])(--?[a-zA-Z][\w-]*)")
SHOWN = [shown for page in (*PAGES, ROOT / "README.rst") for shown in commands(page)]


def test_the_docs_pages_are_there_and_readme_links_each():
    readme = (ROOT / "README.rst").read_text()
    assert {p.name for p in PAGES} >= {"topology.rst", "commands.rst", "status.rst",
                                       "library.rst", "hosts.rst"}
    for page in PAGES:
        assert f"<docs/{page.name}>`_" in readme, page.name
    assert "By hand" in sections((ROOT / "docs" / "library.rst").read_text())
    assert "<docs/library.rst#by-hand>`_" in readme


def _command(name: str) -> click.Command:
    command = main.get_command(click.Context(main), name)
    assert command is not None, f"no command 'mwrun {name}'"
    return command


def _options(command: click.Command) -> set[str]:
    return {o for p in command.params for o in (*p.opts, *p.secondary_opts)
            if o.startswith("-")} | {"--help", "-h"}


@pytest.mark.parametrize("shown", [s for s in SHOWN if s.typed],
                         ids=lambda s: f"{s.page.name}: {s.text}")
def test_a_command_a_page_shows_parses_as_the_command_line_parses_it(shown, monkeypatch):
    monkeypatch.chdir(ROOT)  # as README's commands are typed: from the repository
    args = shlex.split(shown.text)
    command = _command(args[1])
    try:
        command.make_context(f"mwrun {args[1]}", args[2:], parent=click.Context(main))
    except click.ClickException as exc:
        pytest.fail(f"{shown.page.name}: {shown.text}: {exc.format_message()}")


@pytest.mark.parametrize("shown", [s for s in SHOWN if not s.typed],
                         ids=lambda s: f"{s.page.name}: {s.text}")
def test_a_command_a_page_mentions_names_a_real_command_and_its_real_options(shown):
    words = shown.text.split()
    command = _command(words[1])
    named = set(OPTION.findall(" ".join(words[2:])))
    assert named <= _options(command), (shown.page.name, shown.text, named - _options(command))


def test_the_command_table_names_every_command_and_only_real_options():
    rows = synopsis_rows(ROOT / "docs" / "commands.rst")
    shown = {command for command, _ in rows}
    listed = {name for name in main.list_commands(click.Context(main))
              if not _command(name).hidden}
    assert shown == listed
    for command, cell in rows:
        named = set(OPTION.findall(cell))
        assert named <= _options(_command(command)), (cell, named - _options(_command(command)))
    for command in listed:  # every option a user may give is in the table
        cells = " ".join(cell for name, cell in rows if name == command)
        hidden = {o for p in _command(command).params if getattr(p, "hidden", False)
                  for o in p.opts}
        for option in _options(_command(command)) - hidden - {"--help", "-h"}:
            long = [o for p in _command(command).params for o in p.opts if option in p.opts]
            assert any(re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", cells) for o in long), \
                (command, option)


def _topology_snippets() -> list[tuple[str, str]]:
    """(page, block) for every literal block whose first key is a topology's."""
    found = []
    for page in PAGES:
        for block in literal_blocks(page.read_text()):
            first = next((line for line in block.splitlines()
                          if line.strip() and not line.startswith("#")), "")
            if re.match(rf"({'|'.join(_TOP_KEYS)}):", first):
                found.append((page.name, block))
    return found


def _whole(text: str) -> str:
    """A snippet as a topology: one that shows only some keys (hosts, say) gets a
    process on its first host and a world, so the parser sees the rest of it."""
    doc = yaml.safe_load(text)
    if "processes" in doc and "worlds" in doc:
        return text
    hosts = list(doc.get("hosts") or {})
    doc.setdefault("processes", {"p": {"cmd": "python p.py", **({"host": hosts[0]}
                                                               if hosts else {})}})
    doc.setdefault("worlds", {"w": {"members": list(doc["processes"])}})
    return yaml.safe_dump(doc, sort_keys=False)


@pytest.mark.parametrize("page,block", _topology_snippets(), ids=lambda v: v[:40])
def test_a_topology_a_page_shows_parses_with_mwruns_own_parser(page, block):
    # cwd is written relative to configs/ (the examples' topologies), as in the repository
    parse(_whole(block), f"docs/{page}", folder=str(ROOT / "configs"),
          isdir=lambda path: True)


def test_the_pages_show_topologies_at_all():
    assert {page for page, _ in _topology_snippets()} >= {"topology.rst", "hosts.rst"}


def test_the_topology_page_names_every_key_the_parser_takes():
    every = sections((ROOT / "docs" / "topology.rst").read_text())["Every key"]
    top, process, world, host = table_rows(every)
    assert sorted(top) == sorted(_TOP_KEYS)
    assert sorted(process) == sorted(_PROCESS_KEYS)
    assert sorted(world) == sorted(_WORLD_KEYS)
    assert sorted(host) == sorted(_HOST_KEYS)
    assert all(f"``{key}``" in every for key in _SCALE_KEYS)


def test_the_sbatch_script_is_a_shell_script_for_as_many_nodes_as_its_topology_has_hosts():
    [script] = [b for b in literal_blocks((ROOT / "docs" / "hosts.rst").read_text())
                if b.startswith("#!/bin/bash")]
    checked = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert checked.returncode == 0, checked.stderr
    nodes = int(re.search(r"^#SBATCH --nodes=(\d+)", script, re.M).group(1))
    [launch] = [line for line in script.splitlines() if line.startswith("mwrun launch ")]
    topology = load(ROOT / shlex.split(launch)[2])
    assert topology.launcher == "slurm" and len(topology.hosts) == nodes
    assert re.search(r"^source /\S+/bin/activate$", script, re.M)  # a venv, by absolute path


PINNED_NCCL = """\
processes:
  a: {cmd: python a.py, gpus: [0], cpus: "0-1"}
  b: {cmd: python b.py, gpus: [1]}
worlds:
  w: {members: [a, b], backend: nccl}
"""


def test_the_library_page_names_every_variable_a_launched_process_receives():
    inventory = {"localhost": HostInventory(True, (0, 1, 2, 3), ("0", "1"))}
    plan = place(parse(PINNED_NCCL, "t.yaml"), inventory, lambda addr, taken: 40000)
    spec = launch_spec(plan, "a", run_id="r", control="c.sock")
    receives = sections((ROOT / "docs" / "library.rst").read_text())[
        "What a launched process receives"]
    for name in {*spec.env, *spec.prepend}:
        assert f"``{name}``" in receives or f"``{name}=" in receives, name


def test_a_script_a_page_runs_by_hand_exists_and_takes_the_options_shown():
    shown = [line.split("  #")[0].split() for page in PAGES
             for block in literal_blocks(page.read_text()) for line in block.splitlines()
             if line.startswith("python examples/")]
    assert shown, "the By hand section shows its commands"
    common = (ROOT / "examples" / "common.py").read_text()  # the examples' shared options
    for _python, script, *args in shown:
        source = (ROOT / script).read_text()
        known = set(re.findall(r"add_argument\(\s*\"(--[\w-]+)\"", source + common))
        assert {a for a in args if a.startswith("--")} <= known, (script, args, known)
