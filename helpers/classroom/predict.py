"""Predict, then measure: a question for the room before a measurement, answered by it.

Before a notebook's main measurement, :class:`Prediction` shows the question and a few
choices (radio buttons: in class the room votes, the instructor clicks the majority's
pick). After the run, :meth:`Prediction.reveal` compares the measurement with each choice
and puts the answer — the measured value beside each choice, the closest and the pick
marked — **behind a reveal button**: the header "Show the measured answer" of a collapsed
section at the foot of the question's own widget. Nothing on screen gives the answer away
until someone clicks it, whether the measurement ran before the vote (Run All before class)
or after it; a vote clicked while it is hidden stays hidden, and a new measurement
(``reveal`` called again) hides the answer again until the next click.

The cell that calls ``reveal`` shows the same button (a second view of the same section:
a click in either opens both), under the question it answers — so a learner working alone
clicks it there, and the instructor on the answer's slide. The click happens in the browser
(the section's header), not in the kernel: it works inside a jupyterlab-slideshow slide, in
a handout page without a kernel, and needs nothing to run. Read as committed (outputs
stripped) the notebook still teaches: the reveal cell's code names what is compared, and the
reading after it gives the answer in words. Run headless (nbmake), ``reveal`` compares at
once and raises on a bad measurement; :meth:`Prediction.result` (what the notebook keeps in
``results/<notebook>.json``, the pick included) and the lesson checks need no click.

The logic (:func:`compare`) is a plain function, unit-tested; the widget only shows it.
Choices are predictions derived from the notebook's settings, never measurements.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import system

#: The latest prediction under each key, and the results file that holds it once the
#: notebook's ``save_results`` cell has run: a vote clicked later (in class, after Run All)
#: is written there too.
_LIVE: dict[str, Prediction] = {}
_SAVED_IN: dict[str, Path] = {}

#: In a jupyterlab-slideshow deck the prompts are hidden, but the output area's (invisible)
#: prompt overlay still lies over the first 64 px of the output — over the radio buttons — and
#: takes their clicks (found by the browser test). While presenting, let clicks through it.
#: The reveal button (a collapsed section's header) is drawn as a button.
DECK_STYLE = ("<style>body[data-jp-deck-mode='presenting'] .jp-OutputArea-promptOverlay"
              "{pointer-events:none}"
              ".dllab-reveal .jupyter-widget-Collapse-header{cursor:pointer;font-weight:bold;"
              "color:#0550ae;background:#eef4fb;border:1px solid #0969da;border-radius:4px}</style>")
HIDDEN = "Show the measured answer"  #: the reveal button's label while the answer is hidden
SHOWN = "The measured answer"
NOT_YET = "The answer: run the measurement first"


@dataclass(frozen=True)
class Row:
    """One choice after the measurement."""

    label: str
    value: float | str
    off_by: str  #: how far the choice is from the measurement, in words
    closest: bool
    picked: bool


@dataclass(frozen=True)
class Answer:
    """A prediction compared with its measurement."""

    question: str
    measured: float | str
    unit: str
    pick: str | None
    closest: str
    rows: tuple[Row, ...]

    @property
    def pick_was_closest(self) -> bool | None:
        return None if self.pick is None else self.pick == self.closest

    def as_dict(self) -> dict[str, Any]:
        return {"question": self.question, "measured": self.measured, "unit": self.unit,
                "pick": self.pick, "closest": self.closest, "pick_was_closest": self.pick_was_closest}


def _check_choices(choices: Mapping[str, float | str]) -> dict[str, float | str]:
    if not isinstance(choices, Mapping):
        raise TypeError("choices must be a dict of label → value, e.g. {'0.5 s': 0.5, '1 s': 1.0}")
    if len(choices) < 2:
        raise ValueError(f"a prediction needs at least 2 choices, got {len(choices)}: add more to choices")
    kinds = {isinstance(v, str) for v in choices.values()}
    if len(kinds) != 1:
        raise ValueError("choices must be all numbers or all names, not a mix: "
                         f"got {dict(choices)!r}")
    numeric = kinds == {False}
    for label, value in choices.items():
        if not isinstance(label, str) or not label:
            raise ValueError(f"each choice needs a non-empty text label, got {label!r}")
        if numeric and not (isinstance(value, (int, float)) and math.isfinite(value)):
            raise ValueError(f"choice {label!r} has value {value!r}: give a finite number")
    if len(set(choices.values())) != len(choices):
        raise ValueError(f"two choices have the same value: {dict(choices)!r} — make them distinct")
    return dict(choices)


def _fmt(value: float | str, unit: str) -> str:
    if isinstance(value, str):
        return value
    text = f"{value:.3g}"
    return f"{text} {unit}".strip()


def compare(question: str, choices: Mapping[str, float | str], measured: float | str,
            pick: str | None = None, unit: str = "") -> Answer:
    """Compare each choice with ``measured``: the closest number (by ratio for positive
    values, so 0.25 vs 0.5 is as far as 1 vs 2; otherwise by difference), or, for named
    choices, the choice whose value equals the measurement."""
    choices = _check_choices(choices)
    if pick is not None and pick not in choices:
        raise ValueError(f"pick {pick!r} is not one of the choices {list(choices)}")
    numeric = not isinstance(next(iter(choices.values())), str)
    if numeric:
        if isinstance(measured, str) or not math.isfinite(measured):
            raise ValueError(f"measured must be a finite number for numeric choices, got {measured!r}")
        by_ratio = measured > 0 and all(v > 0 for v in choices.values())

        def distance(v: float) -> float:
            return abs(math.log(v / measured)) if by_ratio else abs(v - measured)

        closest = min(choices, key=lambda label: distance(choices[label]))
        rows = []
        for label, value in choices.items():
            if by_ratio:
                ratio = value / measured
                off = "matches" if abs(ratio - 1) < 0.005 else f"{ratio:.2f}× the measurement"
            else:
                off = f"{value - measured:+.3g} {unit}".strip()
            rows.append(Row(label, value, off, label == closest, label == pick))
    else:
        if measured not in choices.values():
            raise ValueError(f"measured {measured!r} is none of the choices' values {list(choices.values())}")
        closest = next(label for label, value in choices.items() if value == measured)
        rows = [Row(label, value, "measured" if label == closest else "not this run", label == closest,
                    label == pick) for label, value in choices.items()]
    return Answer(question, measured, unit, pick, closest, tuple(rows))


def answer_html(answer: Answer) -> str:
    """The table shown after the run: each choice, how far it is from the measurement, marks."""
    body = "".join(
        f"<tr style='{'font-weight:bold' if r.closest else ''}'>"
        f"<td style='text-align:left'>{html.escape(r.label)}</td>"
        f"<td style='text-align:left'>{html.escape(r.off_by)}</td>"
        f"<td>{'✓ closest' if r.closest else ''}</td><td>{'← your pick' if r.picked else ''}</td></tr>"
        for r in answer.rows)
    pick = ("nobody picked" if answer.pick is None else
            "your pick was the closest" if answer.pick_was_closest else f"the closest was “{answer.closest}”")
    return (f"<div class='dllab-answer'><b>Measured: {html.escape(_fmt(answer.measured, answer.unit))}</b>"
            f" — {html.escape(pick)}.<table><tr><th style='text-align:left'>choice</th>"
            "<th style='text-align:left'>against the measurement</th><th></th><th></th></tr>"
            f"{body}</table></div>")


class Prediction:
    """Ask before a measurement; ``reveal(measured)`` after it; the answer shows on a click.

    ``choices`` maps each label to the value it predicts (numbers in ``unit``, or names for a
    which-one question). ``key`` names the prediction in the notebook's results.
    """

    def __init__(self, key: str, question: str, choices: Mapping[str, float | str], unit: str = ""):
        import ipywidgets as W

        if not key or not key.replace("_", "").isalnum():
            raise ValueError(f"key must be a short identifier such as 'per_batch_2_workers', got {key!r}")
        self.key, self.question, self.unit = key, question, unit
        self.choices = _check_choices(choices)
        self.answer: Answer | None = None
        self.skipped: str | None = None
        self._buttons = W.RadioButtons(options=list(self.choices), value=None, layout=W.Layout(width="auto"))
        self._status = W.HTML("<i>Pick one, then run the measurement below.</i>")
        self._result = W.HTML("<i>Not measured yet: run the measurement below, then open this again.</i>")
        # The reveal button: a collapsed section's header. It opens in the browser (no kernel
        # needed), and the kernel hears of it (selected_index) to relabel it.
        self._reveal = W.Accordion(children=[self._result], titles=(NOT_YET,), selected_index=None)
        self._reveal.add_class("dllab-reveal")
        self.widget = W.VBox([W.HTML(f"{DECK_STYLE}<b>Predict:</b> {html.escape(question)}"), self._buttons,
                              self._status, self._reveal],
                             layout=W.Layout(border="1px solid #d0d7de", padding="6px"))
        self.widget.add_class("dllab-prediction")
        #: What the cell that calls reveal() shows: the question again and the same reveal button.
        self.answer_view = W.VBox([W.HTML(f"{DECK_STYLE}<b>The answer to:</b> {html.escape(question)}"),
                                   self._reveal], layout=W.Layout(padding="6px"))
        self.answer_view.add_class("dllab-prediction-answer")
        self._buttons.observe(self._on_pick, "value")
        self._reveal.observe(self._on_open, "selected_index")
        self._measured: float | str | None = None
        _LIVE[key] = self  # a re-run of the cell (a fresh vote) replaces the earlier one

    def _on_pick(self, _change) -> None:  # a vote after the run: the (hidden or shown) table follows it
        if self.answer is not None:
            self._compare(self._measured)
        self._persist()

    def _on_open(self, _change) -> None:
        if self.answer is not None:
            self._reveal.set_title(0, SHOWN if self.answer_shown else HIDDEN)
            self._status.value = ("<i>Measured in this run:</i>" if self.answer_shown else
                                  f"<i>Measured. Vote, then click “{HIDDEN}”.</i>")

    @property
    def answer_shown(self) -> bool:
        """Whether the reveal button has been clicked since the last measurement."""
        return self._reveal.selected_index == 0

    def show_answer(self) -> Prediction:
        """What a click on the reveal button does (for code and tests: a room clicks)."""
        self._reveal.selected_index = 0
        return self

    @property
    def pick(self) -> str | None:
        return self._buttons.value

    @pick.setter
    def pick(self, label: str | None) -> None:
        if label is not None and label not in self.choices:
            raise ValueError(f"pick {label!r} is not one of the choices {list(self.choices)}")
        self._buttons.value = label

    def _compare(self, measured: float | str, hide: bool = False) -> None:
        answer = compare(self.question, self.choices, measured, self.pick, self.unit)  # may raise
        if hide:  # before the new table is written: a new measurement never flashes on screen
            self._reveal.selected_index = None
        self.answer, self._measured = answer, measured
        self._result.value = answer_html(answer)

    def reveal(self, measured: float | str) -> Prediction:
        """Compare the choices with the measurement and put the answer behind the reveal button
        (hidden until it is clicked; a new measurement hides it again). Raises on a measurement
        the choices cannot be compared with; the result is ready for ``save_results`` at once."""
        self._compare(measured, hide=True)
        self.skipped = None
        self._on_open(None)
        self._persist()
        return self

    def _persist(self) -> None:
        """Once the results file holds this prediction, keep it up to date with the pick."""
        path = _SAVED_IN.get(self.key)
        if path is None or _LIVE.get(self.key) is not self or not path.exists():
            return
        payload = json.loads(path.read_text())
        revealed = self.answer is not None or self.skipped is not None
        entry = self.result() if revealed else {  # a fresh vote, its measurement not re-run yet
            self.key: {"question": self.question, "pick": self.pick, "measured": None, "unit": self.unit}}
        payload.setdefault("results", {}).update(entry)
        path.write_text(json.dumps(payload, indent=2, sort_keys=True))

    def skip(self, reason: str) -> Prediction:
        """The measurement could not be made here (e.g. no /dev/shm): say why instead of an answer."""
        if not reason:
            raise ValueError("say why the measurement was skipped, e.g. skip('no /dev/shm on this system')")
        self.skipped, self.answer = reason, None
        self._status.value = self._result.value = f"<b>Not measured here:</b> {html.escape(reason)}"
        self._reveal.set_title(0, "Not measured here")
        return self

    def result(self) -> dict[str, Any]:
        """For ``helpers.save_results``: the question, the pick, the measurement, the closest."""
        if self.answer is not None:
            return {self.key: self.answer.as_dict()}
        if self.skipped is not None:
            return {self.key: {"question": self.question, "pick": self.pick, "measured": None,
                               "skipped": self.skipped}}
        raise RuntimeError(f"prediction {self.key!r} was not revealed: call .reveal(measured) after the run "
                           "(or .skip(reason) when it cannot be measured here)")

    def _repr_mimebundle_(self, **kwargs) -> dict[str, Any]:
        """The question's cell shows the question; the reveal cell, the answer's view (the same
        reveal button). Their plain text (what a reader without widgets sees) gives nothing away."""
        if self.answer is None and self.skipped is None:
            view, text = self.widget, f"Predict: {self.question} — {' / '.join(self.choices)}"
        elif self.skipped is not None:
            view, text = self.answer_view, f"Not measured here: {self.skipped}"
        else:
            view, text = self.answer_view, f"Measured: the answer is behind “{HIDDEN}” in the widget."
        bundle = view._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = text
        return bundle


def saved(path: Path, results: dict[str, Any]) -> None:
    """Called by ``save_results``: predictions in ``results`` now live in ``path``."""
    for key, value in results.items():
        if key in _LIVE and isinstance(value, dict) and "question" in value:
            _SAVED_IN[key] = path


system.on_save(saved)
