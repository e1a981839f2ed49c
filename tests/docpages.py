"""The pages of docs/ (and README.rst) read as the tests that hold them to the code need
them: their literal blocks, their sections' tables, the ``mwrun`` commands they show."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import ROOT

PAGES = sorted((ROOT / "docs").glob("*.rst"))
_UNDERLINE = set("=-~^")


def literal_blocks(text: str) -> list[str]:
    """Every literal block (the indented lines after a paragraph ending in ``::``),
    dedented, in page order."""
    lines = text.splitlines()
    found, i = [], 0
    while i < len(lines):
        if lines[i].rstrip().endswith("::") and not lines[i].lstrip().startswith(".."):
            i += 1
            block = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
                block.append(lines[i])
                i += 1
            body = [line for line in block if line.strip()]
            indent = min((len(line) - len(line.lstrip()) for line in body), default=0)
            found.append("\n".join(line[indent:] for line in block).strip("\n") + "\n")
        else:
            i += 1
    return found


def _title(line: str, under: str) -> bool:
    return bool(line.strip()) and bool(under) and set(under) <= _UNDERLINE \
        and len(under) >= len(line) and not set(line) <= _UNDERLINE | {" "}


def sections(text: str) -> dict[str, str]:
    """Each section's title (inline markup removed) -> its text up to the next title."""
    lines = text.splitlines()
    found: dict[str, list[str]] = {}
    title = ""
    for line, under in zip(lines, [*lines[1:], ""], strict=True):
        if _title(line, under):
            title = line.strip().replace("``", "")
            found[title] = []
        else:
            found.setdefault(title, []).append(line)
    return {name: "\n".join(body) for name, body in found.items()}


def table_rows(section: str) -> list[list[str]]:
    """The first column (each ````name````) of every simple table's rows in a section,
    one list per table."""
    tables, rows, border = [], None, 0
    for line in section.splitlines():
        if re.fullmatch(r"=+(\s+=+)+\s*", line):
            border += 1
            if border % 2 == 1:
                rows = []
            else:
                tables.append(rows)
        elif border % 2 == 1 and rows is not None and (row := re.match(r"``([^`]+)``\s{2,}",
                                                                       line)):
            rows.append(row.group(1))
    return tables


@dataclass(frozen=True)
class Shown:
    """A ``mwrun`` command a page shows: ``typed`` when it is a whole line a user types
    (a literal block's), else a mention in the text, which may be a synopsis
    (``mwrun launch TOPOLOGY [--dry-run]``) or only the start of a command."""

    page: Path
    text: str
    typed: bool


_RUNNER = re.compile(r"^(?:\$ )?(?:(?:salloc|srun|sbatch)\s(?:\S+\s)*?)?(mwrun\s.+)$")


def commands(page: Path) -> list[Shown]:
    text = page.read_text()
    found = []
    for block in literal_blocks(text):
        for line in block.splitlines():
            command = _RUNNER.match(line.split("  #")[0].split(" # ")[0].strip())
            if command:
                found.append(Shown(page, command.group(1).strip(), True))
    for paragraph in text.split("\n\n"):
        joined = " ".join(paragraph.split())
        found += [Shown(page, m, False) for m in re.findall(r"``(mwrun [^`]+)``", joined)]
    return found


def synopsis_rows(page: Path) -> list[tuple[str, str]]:
    """The first table's first column (the command table), each row with the command
    it belongs to (a row that does not start with ``mwrun`` goes on with the one above)."""
    found, command = [], ""
    for cell in table_rows(page.read_text())[0]:
        words = cell.split()
        if words[:1] == ["mwrun"]:
            command = words[1]
        found.append((command, cell))
    return found
