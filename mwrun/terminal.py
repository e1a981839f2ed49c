"""Terminal output for every side that writes to one: aligned tables, durations, sizes,
and colours that switch off when not on a terminal."""

from __future__ import annotations

import os
import re
import sys

COLOURS = (36, 33, 32, 35, 34, 91, 92, 93, 94, 95, 96)
_ESCAPE = re.compile(r"\033\[[0-9;]*m")


def use_colour(stream=None) -> bool:
    stream = stream or sys.stdout
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def paint(text: str, code: int | None, enabled: bool) -> str:
    return f"\033[{code}m{text}\033[0m" if enabled and code else text


def colour_for(index: int) -> int:
    return COLOURS[index % len(COLOURS)]


def table(headers: list[str], rows: list[list[str]], indent: str = "") -> str:
    """Left-aligned columns two spaces apart; the last column is not padded."""
    cells = [headers, *rows]
    widths = [max(width(str(row[i])) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        # Padding by the visible width: a painted cell carries colour codes that take
        # no room on the screen.
        parts = [str(c) + " " * (w - width(str(c)))
                 for c, w in zip(row[:-1], widths[:-1], strict=True)]
        lines.append(indent + "  ".join([*parts, str(row[-1])]).rstrip())
    return "\n".join(lines)


def width(text: str) -> int:
    """How many columns ``text`` takes on a terminal (colour codes take none)."""
    return len(_ESCAPE.sub("", text))


def count(n: int, word: str, plural: str | None = None) -> str:
    """1 -> '1 world', 3 -> '3 worlds'; count(3, 'process', 'processes')."""
    return f"{n} {word if n == 1 else plural or word + 's'}"


def seconds(value: float) -> str:
    """3.0 -> '3s', 0.5 -> '0.5s', 90 -> '1m30s', 7322 -> '2h02m'."""
    if value < 60:
        return f"{value:.1f}s".replace(".0s", "s") if value < 10 else f"{value:.0f}s"
    minutes, secs = divmod(int(value), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def size(value: float | None) -> str:
    if value is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{value:.1f}TiB"
