"""The explorers' one base: knobs → Run → a figure and a summary, errors shown one way, and
the warnings a run raised (PyTorch's worker-count or pin_memory warnings) collapsed under the
figure, so a slide holds its figure."""

from __future__ import annotations

import html
import warnings
from typing import Any

import ipywidgets as W
import matplotlib.pyplot as plt
from IPython.display import display

from ..palette import TEXT


def _show_figure(output: W.Output, figure) -> None:
    """Replace what ``output`` shows with ``figure`` (then close it: it is drawn as an image)."""
    with output:
        output.clear_output(wait=True)
        display(figure)
    plt.close(figure)


def _error_html(error: Exception) -> str:
    return (f"<div style='color:{TEXT['fail']};border:1px solid {TEXT['fail']};padding:6px'><b>Cannot run "
            f"these settings:</b> {html.escape(str(error))}</div>")


#: Warnings Python's default filters do not show: recorded ("always", so a warning shows on every
#: run, not only the first), then left out.
HIDDEN_BY_DEFAULT = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


def warnings_html(caught: list[warnings.WarningMessage]) -> str:
    """The warnings a run raised, once each, in a collapsed section (empty when none); the
    kinds Python hides by default (deprecations, imports, resources) stay hidden."""
    messages = dict.fromkeys(f"{w.category.__name__}: {w.message}" for w in caught
                             if not issubclass(w.category, HIDDEN_BY_DEFAULT))
    if not messages:
        return ""
    items = "".join(f"<li>{html.escape(m)}</li>" for m in messages)
    count = f"{len(messages)} warning{'s' if len(messages) > 1 else ''}"
    return (f"<details class='dllab-warnings'><summary>⚠ {count} during this run (click to read)"
            f"</summary><ul>{items}</ul></details>")


class Explorer:
    """Knobs, a Run button, and what each run measured: a figure and a summary.

    A subclass makes its knobs after ``super().__init__()`` (which makes ``run_button``,
    ``status``, ``summary``, ``output`` and the ``runs`` count), lays them out with
    :meth:`_assemble`, and writes :meth:`_run`: read the knobs, measure, count the run, keep
    its ``last_*`` attribute, set ``summary``; it returns ``(what run() returns, figure)``.

    :meth:`show` displays the explorer and runs it once right away (so the output exists
    without a click, and a failure raises in the cell); button runs show errors in the widget
    instead of raising. Warnings raised during a run are caught (not printed above the figure)
    and listed in ``warnings``, a collapsed section under the figure.
    """

    def __init__(self) -> None:
        self.run_button = W.Button(description="Run", button_style="primary", icon="play")
        self.status, self.summary, self.output = W.HTML(), W.HTML(), W.Output()
        self.warnings = W.HTML()
        self.runs = 0
        self.run_button.on_click(lambda _button: self.run(raise_errors=False))

    #: What the status line says while a run is under way.
    running = "running…"

    def _assemble(self, knobs: list[W.Widget], flags: list[W.Widget], *, width: str,
                  under_button: list[W.Widget] = ()) -> None:
        """The layout every explorer shows: the knobs (sliders) on the left; on the right, ``width``
        wide, the flags, the Run button, ``under_button`` and the status; then the summary, the
        figure, and under it the run's warnings (collapsed)."""
        right = W.VBox([*flags, W.HBox([self.run_button]), *under_button, self.status],
                       layout=W.Layout(width=width))
        self.widget = W.VBox([W.HBox([W.VBox(knobs), right]), self.summary, self.output, self.warnings])

    def _run(self) -> tuple[Any, Any]:
        raise NotImplementedError

    def show(self) -> None:
        """Display the explorer and run it once with its current knobs (raises on failure)."""
        display(self.widget)
        self.run(raise_errors=True)

    def run(self, raise_errors: bool = True):
        """Record one run with the knobs' values and draw it.

        On bad settings or a failed run, the widget shows the message; with
        ``raise_errors`` the exception is raised as well (so a notebook run fails).
        """
        # Work happens outside `with self.output`: an Output widget swallows exceptions
        # raised inside it, which would let a broken explorer pass CI.
        self.run_button.disabled = True
        try:
            self.status.value = f"<i>{self.running}</i>"
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    value, figure = self._run()
                finally:
                    self.warnings.value = warnings_html(caught)
            self.status.value = f"<b>run {self.runs} done</b>"
            _show_figure(self.output, figure)
            return value
        except Exception as error:  # shown in the widget; raised again on request
            self.status.value = ""
            self.summary.value = _error_html(error)
            if raise_errors:
                raise
            return None
        finally:
            self.run_button.disabled = False

    def _ipython_display_(self) -> None:
        # Displaying the object shows the controls only; show() also runs once.
        display(self.widget)
