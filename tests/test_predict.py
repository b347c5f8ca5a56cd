"""The prediction widget's logic: which choice the measurement is closest to, and bad input."""

import pytest

from helpers.classroom.predict import Prediction, answer_html, compare

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
    import json

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
