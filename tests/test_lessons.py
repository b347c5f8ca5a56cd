"""Every notebook's lesson checks hold on a configuration where the lesson is true, and fail
(each of them) on one where it is not. Runs are simulated (helpers.simulate → Timeline), so the
configurations are exact and the tests fast; the notebooks run the same checks on real runs."""

from __future__ import annotations

import pytest

import helpers
from helpers.lessons import baseline

N, Y = 0.2, 0.05  # the blog experiment in smoke sizes: 0.2 s per item, a 0.05 s step


def simulated_runs(batch_load_s=N, step_s=Y, main_s=0.0, first_load_s=None, counts=range(5), items=16):
    runs = {}
    for x in counts:
        loads = [batch_load_s] * items
        if first_load_s is not None and x > 0:
            loads[0] = first_load_s(x)
        runs[x] = helpers.as_timeline(helpers.simulate(items, loads, step_s, x, startup_s=0.01 if x else 0.0,
                                                       main_s=main_s), num_workers=x)
    return runs


def verdicts(checks):
    return {c.claim: c.passed for c in checks}


def failing(checks):
    return [c.claim for c in checks if c.passed is False]


# -- 01 · the baseline loop ------------------------------------------------------------------------
def test_baseline_checks_pass_when_the_lesson_holds():
    checks = baseline.checks(simulated_runs(), N, Y)
    assert len(checks) >= 12 and failing(checks) == [] and not [c for c in checks if c.passed is None]


def test_baseline_checks_fail_when_the_load_is_not_what_the_lesson_says():
    # The loader's items load in half the time the lesson assumes: sync and model claims fail.
    failed = failing(baseline.checks(simulated_runs(batch_load_s=N / 2), N, Y))
    assert "0 workers: every batch costs load + step" in failed
    assert "1 worker: the time per batch is max(n/x, y)" in failed
    assert "2 workers: the long interval is n − y (waiting for the next pair)" in failed


def test_baseline_checks_fail_when_the_loop_has_work_of_its_own():
    # 20 ms of main-process work per batch: with the recommended workers the loop is not at y.
    failed = failing(baseline.checks(simulated_runs(main_s=0.02), N, Y))
    assert "the rule x = n / y = 4: with 4 workers the loop steps at the step time" in failed
    assert "4 workers: the time per batch is max(n/x, y)" in failed


def test_baseline_checks_fail_when_the_workers_are_much_faster_than_the_loop():
    # Items that load in 1 ms: no alternation, and no batch is being built while the loop steps.
    failed = failing(baseline.checks(simulated_runs(batch_load_s=0.001), N, Y))
    assert "2 workers: the long interval is n − y (waiting for the next pair)" in failed
    assert "2 workers: while the loop steps on a batch, a worker builds the one after next" in failed


def test_baseline_checks_fail_when_fewer_workers_already_keep_up():
    runs = simulated_runs()
    runs[3] = simulated_runs(batch_load_s=0.12, counts=[3])[3]  # 3 workers keep up here
    assert "...and with 3 it does not" in failing(baseline.checks(runs, N, Y))


def test_baseline_checks_fail_if_workers_split_the_first_batch():
    # If x workers built the first batch together it would come after n / x: the claim fails.
    failed = failing(baseline.checks(simulated_runs(first_load_s=lambda x: N / x), N, Y))
    assert any(c.startswith("2 workers: the first batch") for c in failed)
    assert any(c.startswith("4 workers: the first batch") for c in failed)


def test_baseline_reports_a_failed_premise_when_workers_start_late():
    runs = simulated_runs()
    late = helpers.as_timeline(helpers.simulate(16, N, Y, 4, startup_s=2.0), num_workers=4)
    epoch = late.epochs[0]
    late.epochs[0] = type(epoch)(**{**epoch.__dict__, "worker_ready": {0: 0.0, 1: 1.0, 2: 2.0, 3: 10.0}})
    runs[4] = late
    not_tested = [c for c in baseline.checks(runs, N, Y) if c.passed is None]
    assert [c.claim for c in not_tested] == ["4 workers: the time per batch is max(n/x, y)"]
    assert "spawn" in not_tested[0].premise


def test_show_checks_renders_and_raises_on_a_failed_claim(monkeypatch):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    good = helpers.checks.holds("a true claim", True, "1 == 1")
    bad = helpers.checks.holds("a false claim", False, "1 != 2")
    untested = helpers.checks.premise_failed("an untested claim", "0.4 cores free", "needs 2 free cores")
    helpers.show_checks([good, untested])
    assert "premise failed" in shown[0]._repr_html_() and "✓" in shown[0]._repr_html_()
    with pytest.raises(helpers.LessonCheckFailed, match="a false claim"):
        helpers.show_checks([good, bad])


# -- 00 · setup check ----------------------------------------------------------------------------
def test_setup_checks_fail_on_a_wrong_torch_and_a_start_method_that_did_not_start():
    from helpers import setup_check
    from helpers.lessons import setup

    good = [setup_check.Check("torch", True, "2.14.1 (lab pins 2.14.1)"),
            setup_check.Check("workers (fork)", True, "2 workers started"),
            setup_check.Check("/dev/shm", False, "64 MiB", "use --shm-size=2g", blocking=False)]
    assert failing(setup.checks(good, ["fork"])) == []
    assert setup.advisories(good) == ["/dev/shm: 64 MiB. use --shm-size=2g"]
    bad = [setup_check.Check("torch", False, "2.9.0 (lab pins 2.14.1)", "run `make lab`"),
           setup_check.Check("workers (fork)", False, "PicklingError: ...")]
    assert failing(setup.checks(bad, ["fork", "spawn"])) == [
        "torch: ready for the lab", "workers start under fork and name themselves correctly",
        "workers start under spawn and name themselves correctly"]


# -- 02 · how many workers ----------------------------------------------------------------------
def sizing_case(load_for=None, after_start_s=0.5, frozen_s=0.0, start_method="fork"):
    from helpers.lessons.num_workers import Calibration
    from helpers.pauses import CollectionTimes

    cal = Calibration(n=0.14, y=0.05, m=0.002, in_worker=0.0, in_pipe=0.0, unpickle=0.002, iterator=0.0)
    load_for = load_for or {}
    verify = {w: helpers.as_timeline(helpers.simulate(24, load_for.get(w, cal.n), cal.y, w, startup_s=0.01,
                                                      main_s=cal.m), num_workers=w) for w in (2, 3)}
    collections = CollectionTimes(400_000, [0.2, 0.21, 0.2], after_start_s, 0.2, [frozen_s] * 3, start_method)
    return cal, verify, collections


def test_num_workers_checks_pass_when_the_lesson_holds():
    from helpers.lessons import num_workers

    checks = num_workers.checks(*sizing_case())
    assert sizing_case()[0].recommended == 3
    assert len(checks) == 5 and failing(checks) == [] and all(c.passed for c in checks)


def test_num_workers_checks_fail_when_the_rule_is_wrong_for_the_loader():
    from helpers.lessons import num_workers

    # The recommended 3 workers are too few (batches cost 0.2 s), and 2 already keep up at 0.1 s.
    failed = failing(num_workers.checks(*sizing_case(load_for={3: 0.2, 2: 0.1})))
    assert failed == ["with the recommended 3 workers the loop steps at y + m",
                      "with 2 the loop waits: its time per batch is above y + m",
                      "the model max(n/x, y + m) predicts the time per batch with 2 workers"]


def test_num_workers_checks_fail_when_collections_do_not_behave_as_taught():
    from helpers.lessons import num_workers

    failed = failing(num_workers.checks(*sizing_case(after_start_s=0.2, frozen_s=0.2)))
    assert failed == ["gc.freeze() makes a full collection at least 5× shorter",
                      "the first full collection after forking workers is slower (it copies shared pages)"]
    spawned = num_workers.checks(*sizing_case(start_method="spawn"))
    assert [c.passed for c in spawned][-1] is None and "forked" in spawned[-1].premise
