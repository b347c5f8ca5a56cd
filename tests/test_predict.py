"""The prediction widget's logic: which choice the measurement is closest to, and bad input;
the widget: the answer stays behind its reveal button until a click, and the vote is kept."""

import json

import ipywidgets as W
import pytest

from helpers.classroom.predict import HIDDEN, NOT_YET, SHOWN, Prediction, answer_html, compare

CHOICES = {"1.25 s": 1.25, "1 s": 1.0, "0.5 s": 0.5, "0.25 s": 0.25}


def test_closest_choice_by_ratio():
    answer = compare("per batch with 2 workers?", CHOICES, 0.48, pick="1 s", unit="s")
    assert answer.closest == "0.5 s"
    assert answer.pick_was_closest is False
    assert [r.closest for r in answer.rows] == [False, False, True, False]
    assert [r.picked for r in answer.rows] == [False, True, False, False]
    # by ratio: 0.36 is closer to 0.25 (1.44x) than to 0.5 (1.39x)? 0.5/0.36 = 1.39 < 0.36/0.25 = 1.44
    assert compare("q", CHOICES, 0.36).closest == "0.5 s"
    assert compare("q", CHOICES, 0.34).closest == "0.25 s"


def test_the_pick_that_matches_is_marked_closest():
    answer = compare("q", CHOICES, 0.251, pick="0.25 s")
    assert answer.pick_was_closest is True
    assert "your pick was the closest" in answer_html(answer)
    assert compare("q", CHOICES, 0.251).pick_was_closest is None
    assert "nobody picked" in answer_html(compare("q", CHOICES, 0.251))


def test_differences_when_values_are_not_all_positive():
    answer = compare("change?", {"slower": -1.0, "same": 0.0, "faster": 1.0}, 0.2)
    assert answer.closest == "same"
    assert answer.rows[2].off_by == "+0.8"


def test_named_choices():
    choices = {"fork": "fork", "forkserver": "forkserver", "spawn": "spawn"}
    answer = compare("which first?", choices, "fork", pick="spawn")
    assert answer.closest == "fork" and answer.pick_was_closest is False
    with pytest.raises(ValueError, match="none of the choices"):
        compare("which first?", choices, "thread")


@pytest.mark.parametrize("choices, match", [
    ({"only": 1.0}, "at least 2 choices"),
    ({"a": 1.0, "b": "x"}, "not a mix"),
    ({"a": 1.0, "b": float("nan")}, "finite number"),
    ({"a": 1.0, "b": 1.0}, "same value"),
    ({"": 1.0, "b": 2.0}, "non-empty text label"),
])
def test_bad_choices_are_refused_naming_the_fix(choices, match):
    with pytest.raises(ValueError, match=match):
        compare("q", choices, 1.0)


def test_bad_pick_and_measurement():
    with pytest.raises(ValueError, match="not one of the choices"):
        compare("q", CHOICES, 1.0, pick="2 s")
    with pytest.raises(ValueError, match="finite number"):
        compare("q", CHOICES, float("inf"))
    with pytest.raises(TypeError, match="dict of label"):
        compare("q", [1.0, 2.0], 1.0)


def test_widget_keeps_the_pick_and_shows_the_answer():
    guess = Prediction("per_batch", "per batch with 2 workers?", CHOICES, unit="s")
    assert guess.pick is None
    with pytest.raises(RuntimeError, match="reveal"):
        guess.result()
    guess.pick = "0.5 s"
    guess.reveal(0.52)
    assert "your pick was the closest" in guess._result.value
    assert guess.result() == {"per_batch": {
        "question": "per batch with 2 workers?", "measured": 0.52, "unit": "s", "pick": "0.5 s",
        "closest": "0.5 s", "pick_was_closest": True}}
    with pytest.raises(ValueError, match="not one of the choices"):
        guess.pick = "3 s"
    with pytest.raises(ValueError, match="short identifier"):
        Prediction("a key", "q", CHOICES)


def test_skip_says_why_and_is_kept():
    guess = Prediction("shm_peak", "peak?", CHOICES, unit="s")
    with pytest.raises(ValueError, match="say why"):
        guess.skip("")
    guess.skip("no /dev/shm on this system")
    assert guess.result()["shm_peak"]["skipped"] == "no /dev/shm on this system"
    assert "Not measured here" in guess._result.value


def test_a_pick_after_the_run_updates_the_answer():
    guess = Prediction("per_batch", "q", CHOICES, unit="s").reveal(0.5)
    assert "nobody picked" in guess._result.value
    guess.pick = "1 s"
    assert "← your pick" in guess._result.value and guess.result()["per_batch"]["pick"] == "1 s"


def test_a_vote_after_save_results_is_written_to_the_results_file(tmp_path, monkeypatch):
    import helpers

    monkeypatch.setenv("DLLAB_RESULTS_DIR", str(tmp_path))
    guess = Prediction("per_batch_vote", "q", CHOICES, unit="s").reveal(0.5)
    path = helpers.save_results("99_test", {**guess.result(), "other": 1})
    assert json.loads(path.read_text())["results"]["per_batch_vote"]["pick"] is None
    guess.pick = "1 s"  # the room votes after Run All
    saved = json.loads(path.read_text())["results"]
    assert saved["per_batch_vote"]["pick"] == "1 s" and saved["other"] == 1
    fresh = Prediction("per_batch_vote", "q", CHOICES, unit="s")  # the cell re-run for a fresh vote
    fresh.pick = "0.25 s"
    assert json.loads(path.read_text())["results"]["per_batch_vote"]["pick"] == "0.25 s"
    guess.pick = "1.25 s"  # the replaced widget no longer writes
    assert json.loads(path.read_text())["results"]["per_batch_vote"]["pick"] == "0.25 s"
    fresh.reveal(0.26)
    assert json.loads(path.read_text())["results"]["per_batch_vote"]["closest"] == "0.25 s"


def on_screen(widget) -> str:
    """The text a widget shows: a collapsed section shows its header (the reveal button) only."""
    if isinstance(widget, W.Accordion):
        return " ".join([*widget.titles, *(on_screen(child) for i, child in enumerate(widget.children)
                                           if widget.selected_index == i)])
    if isinstance(widget, W.Box):
        return " ".join(on_screen(child) for child in widget.children)
    if isinstance(widget, W.RadioButtons):
        return " ".join(widget.options)
    return str(getattr(widget, "value", ""))


def test_measured_before_the_vote_the_answer_stays_hidden_until_the_click():
    guess = Prediction("per_batch", "per batch?", CHOICES, unit="s").reveal(0.52)  # Run All before class
    assert not guess.answer_shown and HIDDEN in on_screen(guess.widget)
    for view in (guess.widget, guess.answer_view):  # the question's cell, and the cell that revealed
        assert "0.52" not in on_screen(view) and "Measured:" not in on_screen(view)
        assert "closest" not in on_screen(view) and "your pick" not in on_screen(view)
    guess.pick = "0.5 s"  # the room votes: still hidden, the vote kept
    assert not guess.answer_shown and "0.52" not in on_screen(guess.widget)
    assert guess.result()["per_batch"]["pick"] == "0.5 s"
    guess._reveal.selected_index = 0  # the click, as the browser sends it
    assert guess.answer_shown and guess._reveal.titles == (SHOWN,)
    for view in (guess.widget, guess.answer_view):  # one button, two views: both open
        assert "Measured: 0.52 s" in on_screen(view) and "your pick was the closest" in on_screen(view)


def test_measured_after_the_vote_the_answer_waits_for_the_click_too():
    guess = Prediction("per_batch", "per batch?", CHOICES, unit="s")
    assert guess._reveal.titles == (NOT_YET,) and "Measured" not in on_screen(guess.widget)
    guess.pick = "1 s"
    guess.reveal(0.26)
    assert not guess.answer_shown and "0.26" not in on_screen(guess.widget)
    guess.show_answer()
    shown = on_screen(guess.widget)
    assert "Measured: 0.26 s" in shown and "the closest was “0.25 s”" in shown
    seen = []  # what the open section showed while the new measurement came in
    guess._result.observe(lambda change: seen.append(guess.answer_shown), "value")
    guess.reveal(0.49)  # measured again: hidden again (before its table is written) until the next click
    assert seen == [False]
    assert not guess.answer_shown and guess._reveal.titles == (HIDDEN,)
    assert "0.49" not in on_screen(guess.widget)
    with pytest.raises(ValueError, match="finite number"):  # a bad measurement raises (headless too)
        guess.reveal(float("nan"))


def test_the_reveal_cell_shows_the_same_button_and_its_text_gives_nothing_away():
    guess = Prediction("per_batch", "per batch?", CHOICES, unit="s")
    bundle = guess._repr_mimebundle_()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == guess.widget.model_id
    guess.reveal(0.52)
    bundle = guess._repr_mimebundle_()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == guess.answer_view.model_id
    assert guess._reveal in guess.answer_view.children and guess._reveal in guess.widget.children
    assert "0.52" not in bundle["text/plain"] and HIDDEN in bundle["text/plain"]
    guess.skip("no /dev/shm here")
    assert guess._repr_mimebundle_()["text/plain"] == "Not measured here: no /dev/shm here"


@pytest.mark.parametrize("vote_first", [True, False], ids=["vote, then measure", "measure, save, then vote"])
def test_the_vote_is_saved_with_the_result_in_either_order_without_a_click(tmp_path, monkeypatch, vote_first):
    import helpers

    monkeypatch.setenv("DLLAB_RESULTS_DIR", str(tmp_path))
    guess = Prediction("per_batch_order", "q", CHOICES, unit="s")
    if vote_first:
        guess.pick = "0.5 s"
    path = helpers.save_results("99_order", guess.reveal(0.52).result())
    if not vote_first:
        guess.pick = "0.5 s"
    saved = json.loads(path.read_text())["results"]["per_batch_order"]
    assert saved["pick"] == "0.5 s" and saved["measured"] == 0.52 and saved["pick_was_closest"] is True
    assert not guess.answer_shown
