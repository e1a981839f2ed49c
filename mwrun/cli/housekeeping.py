"""The verbs that keep the runs folder: ``runs`` (every run, its state and its size on
disk) and ``clean`` (finished runs removed, by count or age; never a live one). Thin
click commands: what may go is ``records``' retention, a folder's liveness and its
removal ``mwrun.runs``'; ``commands`` adds them to the ``mwrun`` group."""

from __future__ import annotations

import time

import click

from mwrun.cli.common import warn
from mwrun.records import DEFAULT_KEEP, KEEP_ENV, Entry, cleanable, parse_age


class Age(click.ParamType):
    """30m, 12h, 7d, 2w: seconds (a bad one is a usage error, never a traceback)."""

    name = "age"

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        try:
            return parse_age(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def entries() -> list[tuple[Entry, dict | None]]:
    """Every run under the runs folder as the retention sees it, with its state, newest
    first; those whose state cannot be read last (nobody can tell whether they are
    live: their state is None)."""
    from mwrun import runs

    found, damaged = runs.scan()
    listed: list[tuple[Entry, dict | None]] = [
        (Entry(run_id, doc["state"], doc["started_at"],
               runs.ended_at(run_id) if doc["state"] in runs.FINAL else None,
               runs.held(doc), runs.disk_bytes(runs.run_path(run_id)),
               doc["state"] not in runs.FINAL), doc)  # else load_state says lost
        for run_id, doc in found]
    return listed + [(Entry(run_id, None, mtime, None, _unreadable(run_id, why),
                            runs.disk_bytes(runs.run_path(run_id))), None)
                     for run_id, mtime, why in sorted(damaged, key=lambda d: -d[1])]


def _unreadable(run_id: str, why: str) -> str:
    from mwrun import runs

    return (f"{why.removeprefix(f'run {run_id!r}: ')}; clean never removes a run whose"
            f" state it cannot read (rm -r {runs.run_path(run_id)} does)")


def retention_line() -> str:
    return (f"retention: mwrun clean keeps the newest {DEFAULT_KEEP} finished runs"
            f" (--keep N, or {KEEP_ENV}; --older-than AGE); it never removes a live run")


@click.command("runs")
@click.option("--json", "as_json", is_flag=True, help="A list of objects, newest first.")
def runs_(as_json):
    """Every run under $MWRUN_HOME/runs, newest first: its id, name, state, when it
    started, how long it ran (or has run), its exit status and its size on disk.

    A run is live while its head runs; one whose head died without ending it is
    lost. The last line says what `mwrun clean` would keep.

    \b
    Examples:
      mwrun runs
      mwrun runs --json
    """
    import json

    from mwrun import runs
    from mwrun.cli import housekeepview

    now, listed = time.time(), entries()
    if as_json:
        click.echo(json.dumps([housekeepview.as_json(e, doc, now, str(runs.run_path(e.run_id)))
                               for e, doc in listed], indent=1))
        return
    if not listed:
        click.echo(f"no runs under {runs.runs_root()}")
        return
    click.echo(housekeepview.table(listed, now))
    going = cleanable([e for e, _ in listed], now).remove
    click.echo(f"\n{retention_line()}; now it would remove {len(going)}"
               + (" (mwrun clean --dry-run names them)" if going else ""))


@click.command()
@click.option("--keep", type=click.IntRange(min=0), envvar=KEEP_ENV, default=None,
              help=f"Keep the newest N finished runs (default {DEFAULT_KEEP} when neither"
                   f" this nor --older-than is given; ${KEEP_ENV} sets it).")
@click.option("--older-than", type=Age(), default=None, metavar="AGE",
              help="Remove finished runs that ended more than AGE ago: 30m, 12h, 7d, 2w.")
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
def clean(keep, older_than, dry_run):
    """Remove finished runs: those beyond the newest N, or that ended more than AGE
    ago (either, when both are given). A live run is never removed, nor one whose
    head is still ending, nor a lost run whose processes still run (mwrun stop ends
    them), nor one whose state cannot be read.

    \b
    Examples:
      mwrun clean --dry-run
      mwrun clean
      mwrun clean --keep 5
      mwrun clean --older-than 7d
    """
    from mwrun import runs
    from mwrun.cli import housekeepview
    from mwrun.errors import RunError

    listed = [entry for entry, _ in entries()]
    choice = cleanable(listed, time.time(), keep, older_than)
    for entry in choice.kept_held + choice.unreadable:
        warn(f"kept {entry.run_id}: {entry.held}")
    freed, failed = 0, []
    for entry, why in choice.remove:
        if dry_run:
            click.echo(f"would remove {housekeepview.one(entry)}: {why}")
            freed += entry.bytes
            continue
        try:
            freed += runs.remove(entry.run_id)
        except RunError as exc:
            failed.append(str(exc))
            continue
        click.echo(f"removed {housekeepview.one(entry)}: {why}")
    for text in failed:
        warn(text)
    click.echo(housekeepview.summary(choice, len(choice.remove) - len(failed), freed,
                                     dry_run, listed))
    if failed:
        raise RunError(f"{len(failed)} run(s) could not be removed (said above)")
