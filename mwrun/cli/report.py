"""``mwrun report``: a run's timeline (mwrun.records) drawn as one picture.

One lane per world with its calls/s over time; kills, breaks, restarts and re-forms
marked; each fault's downtime shaded and measured on the lane; the text summary under
the lanes. matplotlib is an optional extra (``pip install 'mwrun[report]'``), imported
only here, so ``mwrun --help`` and ``status`` never pay for it.
"""

from __future__ import annotations

from pathlib import Path

from mwrun import runs
from mwrun.cli.drillview import lines
from mwrun.cli.summaryview import summary
from mwrun.errors import MwrunError, RunError, UsageError
from mwrun.records import DRILL, Timeline, read, steps
from mwrun.schema import REPORT
from mwrun.schema import Event as E

FORMATS = (".png", ".svg", ".pdf")
DPI = 90
MAX_ROWS = 3  # rows of downtime labels over a lane; past it, arrows only (the summary lists them)
LABEL_BOX = {"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 0.5}
MARKS = {  # event -> (colour, line style, legend label)
    "kill": ("#d62728", "--", "kill (drill)"),
    "break": ("#d62728", "-", "break"),
    "restart": ("#ff7f0e", ":", "restart"),
    "form": ("#2ca02c", "-", "re-form"),
    "scale": ("#9467bd", "-", "scaled (added, resized)"),
    "drain": ("#9467bd", ":", "drained"),
}


def report(run: str | None, output: str | None) -> list[str]:
    """``mwrun report``: draw RUN (default: the newest run); the lines to print, the
    last saying where the picture is, in full (``-o r.png`` is in the current folder)."""
    if run is None:
        found = runs.all_runs()
        if not found:
            raise RunError(f"no runs under {runs.runs_root()}")
        run = found[0][0]
    _, state = runs.find(run)  # a clear error for a run that is not there
    tl = read(runs.run_path(run), run)
    out = (Path(output) if output else runs.run_path(run) / REPORT).absolute()
    return [*draw(tl, out, runs.is_live(state)), f"picture: {out}"]


def pyplot():
    try:
        import matplotlib
    except ImportError:
        raise MwrunError("mwrun report draws with matplotlib, which is not installed here;"
                         " install it with: pip install 'mwrun[report]'") from None
    matplotlib.use("Agg")  # files only: no display needed, none opened
    import matplotlib.pyplot as plt

    return plt


def draw(tl: Timeline, out: Path, live: bool | None = None) -> list[str]:
    """Write the picture of ``tl`` to ``out`` (format from its suffix); return the
    summary it carries (each drill's in full: the picture has its lines per world).
    ``live``: whether the run's head still runs (None: not known)."""
    if out.suffix.lower() not in FORMATS:
        raise UsageError(f"{out}: the picture can be {', '.join(FORMATS)}, not"
                         f" {out.suffix or 'a file without a suffix'}")
    plt = pyplot()
    fig = figure(plt, tl, live)
    try:
        fig.savefig(out, dpi=DPI, bbox_inches="tight", pad_inches=0.2)  # all the text
    except OSError as exc:
        raise MwrunError(f"cannot write {out}: {exc.strerror}") from None
    finally:
        plt.close(fig)
    return summary(tl, live) + drills(tl)


def figure(plt, tl: Timeline, live: bool | None = None):
    """The picture of ``tl`` as a matplotlib figure, laid out and labelled."""
    lines = summary(tl, live) + drills(tl, brief=True)
    lanes = list(tl.worlds)
    text_height = 0.16 * len(lines) + 0.3
    lane = 1.5 if len(lanes) <= 4 else 0.75  # many worlds: thinner lanes, one picture
    fig, axes = plt.subplots(len(lanes) + 1, 1, sharex=False, squeeze=False,
                             figsize=(10, lane * len(lanes) + text_height + 0.8),
                             gridspec_kw={"height_ratios": [lane] * len(lanes) + [text_height]})
    axes = [a[0] for a in axes]
    tops = {}
    for ax, world in zip(axes, lanes, strict=False):
        tops[world] = _lane(ax, tl, world)
        ax.sharex(axes[0])
        if ax is not axes[-2]:
            ax.tick_params(labelbottom=False)
    axes[-2].set_xlabel("seconds since the run started")
    handles = [plt.Line2D([], [], color=c, linestyle=s, label=label)
               for c, s, label in MARKS.values()]
    handles.append(plt.Rectangle((0, 0), 1, 1, color="#d62728", alpha=0.15, label="down"))
    axes[0].legend(handles=handles, loc="lower left", bbox_to_anchor=(0, 1.02), ncol=4,
                   fontsize=8, frameon=False)
    axes[0].set_title(f"run {tl.run_id}: calls/s per world", loc="right", fontsize=10)
    text = axes[-1]
    text.axis("off")
    text.text(0, 1, "\n".join(lines), va="top", ha="left", family="monospace", fontsize=7.5,
              transform=text.transAxes)
    fig.tight_layout(h_pad=0.4)
    renderer = fig.canvas.get_renderer()
    for ax, world in zip(axes, lanes, strict=False):  # once the lanes' sizes are final
        downtimes(ax, tl, world, tops[world], live, renderer)
    return fig


def drills(tl: Timeline, brief: bool = False) -> list[str]:
    """The summary of each ``mwrun drill`` the history recorded."""
    found = []
    for e in tl.events:
        if e["event"] == E.DRILL:
            try:
                found += lines(e, brief)
            # Not a record this mwrun wrote (a time past what the clock can show, too).
            except (KeyError, TypeError, AttributeError, ValueError, OverflowError, OSError):
                found.append("note: a drill record could not be read")
    return found


def _lane(ax, tl: Timeline, world: str) -> float:
    """One world's lane: its calls/s, its marks, its down spans; the top of its scale."""
    t0 = tl.start
    if tl.counts.get(world):  # calls/s from the counts: 0 inside every down span
        edges, ys = steps(tl.counts[world], tl.downs(world))
        xs = [t - t0 for t in edges]
        # The scale is the pace held for half a second or more: a blip (a beat's calls
        # over the sliver of up time after a re-form) is drawn clipped, not as the scale.
        held = [y for y, a, b in zip(ys, edges, edges[1:], strict=False) if b - a >= 0.5]
        top = max(held or ys or [0]) or 1.0
        if ys:
            ax.stairs(ys, xs, color="#1f77b4", linewidth=1.2)
            ax.stairs(ys, xs, fill=True, color="#1f77b4", alpha=0.15)
    else:  # an older history: its one-second rate samples
        points = tl.samples[world]
        xs = [t - t0 for t, _, _ in points]
        ys = [c for _, c, _ in points]
        top = max(ys, default=0) or 1.0
        if points:
            ax.plot(xs, ys, drawstyle="steps-pre", color="#1f77b4", linewidth=1.2)
            ax.fill_between(xs, ys, step="pre", color="#1f77b4", alpha=0.15)
    ax.set_xlim(0, max(tl.last - t0, 1.0))
    ax.set_ylim(0, top * 1.1)
    ax.set_ylabel(world, rotation=0, ha="right", va="center", fontsize=9)
    ax.tick_params(labelsize=8)
    ax.grid(axis="y", alpha=0.3)
    members = tl.worlds[world]
    for e in tl.events:
        kind = _mark(e, world, members)
        if kind is not None:
            colour, style, _ = MARKS[kind]
            ax.axvline(e["t"] - t0, color=colour, linestyle=style, linewidth=1)
    for f in (f for f in tl.faults if f.world == world):
        ax.axvspan(f.start - t0, (f.back if f.back is not None else tl.last) - t0,
                   color="#d62728", alpha=0.15, linewidth=0)
    _waits(ax, tl, world)
    return top


def _waits(ax, tl: Timeline, world: str) -> None:
    """Each member's wait per collective, on the lane's right-hand scale (ms): the
    member its peers wait for waits least (its line at the bottom)."""
    members = tl.waits.get(world)
    if not members:
        return
    import matplotlib  # loaded already (pyplot): its palettes

    palette = matplotlib.colormaps["Dark2"]  # none of the marks' colours or the lane's
    colours = [palette(i) for i in range(palette.N)]
    twin = ax.twinx()
    for i, (member, points) in enumerate(sorted(members.items())):
        twin.plot([t - tl.start for t, _ in points], [w * 1000 for _, w in points],
                  linewidth=0.8, color=colours[i % len(colours)], label=member)
    twin.set_ylim(bottom=0)
    twin.set_ylabel("wait per\ncollective, ms", fontsize=7)
    twin.tick_params(labelsize=7)
    twin.legend(loc="upper right", fontsize=6, frameon=False, ncol=min(len(members), 4))


def downtimes(ax, tl: Timeline, world: str, top: float, live: bool | None, renderer) -> list:
    """Each fault's downtime over the lane, an arrow across it with its label above,
    in rows that never overlap: each label (with its arrow) takes the lowest row where
    it clears the ones before it, measured as drawn; the lane's scale leaves room for
    the rows above its traffic. The labels, for whoever checks them."""
    from matplotlib import transforms

    t0 = tl.start
    mine = [f for f in tl.faults if f.world == world]
    if not mine:
        return []
    at = transforms.blended_transform_factory(ax.transData, ax.transAxes)
    placed = []  # (label, arrow's ends in data, its extent in pixels)
    for f in mine:
        a, b = f.start - t0, (f.back if f.back is not None else tl.last) - t0
        down = f.downtime(tl.last)
        text = f"down {down * 1000:.0f} ms" if down < 1 else f"down {down:.2f} s"
        more = " (so far)" if f.back is None and live else ""
        label = ax.text((a + b) / 2, 0, text + more, ha="center", va="bottom", fontsize=8,
                        color="#d62728", transform=at, bbox=LABEL_BOX)
        box = label.get_window_extent(renderer)
        ends = ax.transData.transform([(a, 0), (b, 0)])[:, 0]
        placed.append((label, a, b, (min(box.x0, *ends), max(box.x1, *ends))))
    row_of = rows([extent for *_, extent in placed], gap=4.0)
    height = max(lab.get_window_extent(renderer).height for lab, *_ in placed)
    step = (height + 6.0) / max(ax.get_window_extent(renderer).height, 1.0)  # axes share
    count = max(row_of) + 1
    if count > MAX_ROWS:  # too many to read over the lane: arrows only, one row (a
        for label, *_ in placed:  # world's faults never overlap), numbers below
            label.remove()
        ax.set_ylabel(f"{world}\n({len(mine)} faults:\nsee below)", rotation=0, ha="right",
                      va="center", fontsize=9)
        placed, row_of, count = [(None, a, b, e) for _, a, b, e in placed], [0] * len(mine), 1
    base = 1.0 - count * step  # the lowest row's arrow; the traffic stays under it
    ax.set_ylim(0, top * 1.1 / max(base - 0.02, 0.2))
    for (label, a, b, _), row in zip(placed, row_of, strict=True):
        y = base + row * step
        ax.annotate("", xy=(a, y), xytext=(b, y), xycoords=at, textcoords=at,
                    arrowprops={"arrowstyle": "<->", "color": "#d62728", "lw": 1})
        if label is not None:
            label.set_y(y + 0.01)
    return [label for label, *_ in placed if label is not None]


def rows(extents: list[tuple[float, float]], gap: float) -> list[int]:
    """For each (left, right), in order, the lowest row where it starts at least
    ``gap`` after the last one placed in that row ends: none overlap in a row."""
    ends: list[float] = []  # each row's rightmost end so far
    found = []
    for left, right in extents:
        row = next((i for i, end in enumerate(ends) if left >= end + gap), len(ends))
        if row == len(ends):
            ends.append(right)
        else:
            ends[row] = max(ends[row], right)
        found.append(row)
    return found


def _mark(e: dict, world: str, members: list[str]) -> str | None:
    kind = e["event"]
    if kind == E.SIGNAL and e.get("why") == DRILL and e.get("process") in members:
        return "kill"
    if kind == E.BREAK and e.get("world") == world:
        return "break"
    if kind == E.SPAWN and e.get("restarts", 0) > 0 and e.get("process") in members:
        return "restart"
    if kind == E.FORM and e.get("world") == world and e.get("generation", 0) > 0:
        return "form"
    if kind in (E.ADD, E.RESIZE) and e.get("world") == world:
        return "scale"
    if kind in (E.DRAIN, E.REMOVE) and e.get("world") == world:
        return "drain"
    return None
