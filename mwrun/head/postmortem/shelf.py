"""How many post-mortem bundles a run keeps: each world's first and latest always (the
first says how its trouble began, the latest is what ``status`` points at), and of the
others only the newest, at most KEEP_BETWEEN of them and BUNDLES_BYTES on disk with
the kept firsts and latests. A bundle is 28-48 KiB: without a bound a drill of
thousands of breaks filled the run folder with bundles nobody reads.

The older bundles go first, in the order they were written; a world made again under
its name is the same world here. ``beyond`` chooses (pure); ``Shelf`` measures the
folders as they are written and removes what ``beyond`` names.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from mwrun.runs import disk_bytes

KEEP_BETWEEN = 32  # bundles kept beside each world's first and latest, at most
BUNDLES_BYTES = 8 * 2**20  # on disk, the firsts and latests included (as history's cap)


@dataclass(frozen=True)
class Kept:
    world: str
    folder: Path
    size: int  # bytes on disk


def beyond(kept: list[Kept], between: int = KEEP_BETWEEN,
           limit: int = BUNDLES_BYTES) -> list[Kept]:
    """Of ``kept`` (oldest first), those to remove: every bundle that is neither its
    world's first nor its latest, once the newer ones fill ``between`` or ``limit``
    (the firsts and latests count towards ``limit``, and are never removed)."""
    first: dict[str, int] = {}
    latest: dict[str, int] = {}
    for index, bundle in enumerate(kept):
        first.setdefault(bundle.world, index)
        latest[bundle.world] = index
    held = set(first.values()) | set(latest.values())
    total, count, full = sum(kept[i].size for i in held), 0, False
    gone = []
    for index in reversed(range(len(kept))):
        if index in held:
            continue
        # Once one does not fit, none older does: what is kept is the newest stretch.
        full = full or count >= between or total + kept[index].size > limit
        if full:
            gone.append(kept[index])
        else:
            count, total = count + 1, total + kept[index].size
    return gone[::-1]


class Shelf:
    """The run's bundles on disk, oldest first; each new one may retire older ones."""

    def __init__(self, folder: Path, between: int | None = None, limit: int | None = None):
        self.between = KEEP_BETWEEN if between is None else between
        self.limit = BUNDLES_BYTES if limit is None else limit
        # A head that takes over a run finds the bundles of the one before it.
        self.kept = found(folder)

    def add(self, world: str, folder: Path) -> list[Path]:
        """A bundle written: the folders removed to keep the bound."""
        self.kept.append(Kept(world, folder, disk_bytes(folder)))
        gone = beyond(self.kept, self.between, self.limit)
        for bundle in gone:
            # A full disk or a folder someone opened must not stop the supervisor.
            shutil.rmtree(bundle.folder, ignore_errors=True)
        removed = {id(b) for b in gone}
        self.kept = [b for b in self.kept if id(b) not in removed]
        return [b.folder for b in gone]


def found(folder: Path) -> list[Kept]:
    """The bundles already under ``folder``, in the order they were declared."""
    dated = []
    with contextlib.suppress(OSError):
        for entry in folder.iterdir():
            try:
                doc = json.loads((entry / "bundle.json").read_text())
                dated.append((float(doc["declared_at"]), Kept(str(doc["world"]), entry,
                                                              disk_bytes(entry))))
            except (OSError, ValueError, KeyError, TypeError):
                continue  # not a bundle (or half of one): not ours to remove
    return [kept for _, kept in sorted(dated, key=lambda d: d[0])]

