"""Progress of long commands (demo, check-store, local-cluster) on stderr, shown only when stderr is a
terminal: piped output, --json and tests see nothing of it. Also the console that tables print to."""

from __future__ import annotations

import sys
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)


def table_console() -> Console:
    """Where a command prints its table: stdout at the terminal's width, or, piped, wide enough that no
    column is cut ("n…" in a file or a grep helps no one)."""
    return Console() if sys.stdout.isatty() else Console(width=1000)


def progress(*columns: str | ProgressColumn, console: Console | None = None) -> Progress:
    """A transient rich Progress on stderr; disabled (a no-op) unless stderr is a terminal."""
    console = console or Console(stderr=True)
    # While it shows, what the command prints to stdout is drawn above it, if stdout is the terminal
    # too; stdout going elsewhere (a pipe, a file) is left alone.
    return Progress(*columns, console=console, transient=True, disable=not console.is_terminal,
                    redirect_stdout=sys.stdout.isatty())


class Phases:
    """One line per phase of a long command: the current one spins (with a bar when its size is known),
    finished ones show a tick until the command ends."""

    def __init__(self, console: Console | None = None) -> None:
        self.bar = progress(SpinnerColumn(finished_text="[green]✓[/green]"), TextColumn("{task.description}"),
                            BarColumn(), TaskProgressColumn(), TimeElapsedColumn(), console=console)
        self._current: TaskID | None = None

    @property
    def shown(self) -> bool:
        return not self.bar.disable

    def output(self) -> Console:
        """Where the command prints its results meanwhile: a rich Console writes to the real stdout, past the
        bar's redirection, so while the bar shows on the same terminal they go through the bar's console
        (drawn above it); otherwise to stdout."""
        return self.bar.console if self.shown and sys.stdout.isatty() else Console()

    def start(self, description: str, total: float | None = None) -> TaskID:
        """Finish the current phase and start the next; `total` gives it a bar (advance it with update)."""
        self.done()
        self._current = self.bar.add_task(description, total=total)
        return self._current

    def update(self, completed: float, total: float | None = None) -> None:
        if self._current is not None:
            self.bar.update(self._current, completed=completed, total=total)

    def done(self) -> None:
        """The current phase finished."""
        if self._current is not None:
            total = next((t.total for t in self.bar.tasks if t.id == self._current), None) or 1
            self.bar.update(self._current, total=total, completed=total)
            self._current = None

    def __enter__(self) -> Phases:
        self.bar.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.done()
        self.bar.stop()
