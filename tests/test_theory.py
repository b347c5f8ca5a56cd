"""The step-time model and the schedule simulation."""

import pytest

from helpers import theory


def test_synchronous_loop_pays_load_plus_step():
    assert theory.step_time(1.0, 0.25, 0) == pytest.approx(1.25)
    assert theory.step_time(1.0, 0.25, 0, main_s=0.1) == pytest.approx(1.35)


@pytest.mark.parametrize("workers, expected", [(1, 1.0), (2, 0.5), (3, 1 / 3), (4, 0.25),
                                               (8, 0.25)])
def test_with_workers_the_slower_side_sets_the_pace(workers, expected):
    assert theory.step_time(1.0, 0.25, workers) == pytest.approx(expected)


def test_main_process_work_is_on_the_loops_side():
    # m lengthens the loop's cycle: with enough workers the pace is y + m...
    assert theory.step_time(1.0, 0.25, 8, main_s=0.05) == pytest.approx(0.30)
    # ...and when the workers are slower, m hides under their pace.
    assert theory.step_time(1.0, 0.25, 2, main_s=0.05) == pytest.approx(0.5)


def test_recommended_workers_follow_n_over_y_plus_m():
    assert theory.recommend_num_workers(1.0, 0.25) == 4
    assert theory.recommend_num_workers(0.2, 0.05) == 4  # no float round-up to 5
    assert theory.recommend_num_workers(1.0, 0.3) == 4
    assert theory.recommend_num_workers(1.0, 0.2, main_s=0.05) == 4  # the loop needs 0.25 s
    assert theory.recommend_num_workers(1.0, 0.0, main_s=0.0, cores=6) == 6  # nothing to keep up with
    assert theory.recommend_num_workers(0.0, 0.1) == 0
    # the rule and the model agree: with x workers the pace is the loop's, with x - 1 it is not
    for n, y, m in [(1.0, 0.25, 0.0), (0.6, 0.25, 0.01), (0.45, 0.1, 0.02)]:
        x = theory.recommend_num_workers(n, y, main_s=m)
        assert theory.step_time(n, y, x, main_s=m) == pytest.approx(y + m)
        assert theory.step_time(n, y, x - 1, main_s=m) > y + m if x > 1 else True


def test_first_batch_does_not_get_faster_with_more_workers():
    one = theory.first_batch_time(1.0, 1, startup_s=0.1)
    four = theory.first_batch_time(1.0, 4, startup_s=0.1)
    assert one == four == pytest.approx(1.1)
    assert theory.first_batch_time(1.0, 0) == pytest.approx(1.0)


@pytest.mark.parametrize("workers, pattern", [
    (0, [1.25] * 8),
    (1, [1.25] + [1.0] * 7),
    (2, [1.25] + [0.25, 0.75] * 3 + [0.25]),
    (3, [1.25, 0.25, 0.25, 0.5, 0.25, 0.25, 0.5, 0.25]),
    (4, [1.25] + [0.25] * 7),
])
def test_simulation_reproduces_the_blog_patterns(workers, pattern):
    plan = theory.simulate(8, 1.0, 0.25, workers)
    assert theory.simulated_intervals(plan) == pytest.approx(pattern)


def test_simulation_assigns_round_robin_and_respects_prefetch_depth():
    plan = theory.simulate(6, 1.0, 0.1, 2, prefetch_factor=1)
    assert [b.worker for b in plan] == [0, 1, 0, 1, 0, 1]
    # Batch 2 is only handed out when the loop takes batch 0 (depth 1 x 2 workers).
    assert plan[2].fetch_start == pytest.approx(plan[0].ready)


def test_main_process_cost_is_paid_per_batch_in_the_simulation():
    plan = theory.simulate(6, 1.0, 0.2, 8, main_s=0.05)
    assert theory.simulated_intervals(plan)[2:] == pytest.approx([0.25] * 4)


def test_uneven_batches_can_be_simulated():
    plan = theory.simulate(4, [0.1, 1.0, 0.1, 0.1], 0.2, 2)
    assert plan[1].fetch_end - plan[1].fetch_start == pytest.approx(1.0)
    with pytest.raises(ValueError, match="3 batch loads for 4 batches"):
        theory.simulate(4, [0.1, 0.1, 0.1], 0.2, 2)


def test_a_schedule_becomes_a_timeline():
    plan = theory.simulate(8, 1.0, 0.25, 2)
    tl = theory.as_timeline(plan)
    assert tl.intervals() == pytest.approx(theory.simulated_intervals(plan))
    assert tl.workers == [0, 1] and [b.worker_seq for b in tl.batches if b.worker == 1] == [0, 1, 2, 3]
    assert tl.config["num_workers"] == 2


def test_negative_inputs_are_refused():
    with pytest.raises(ValueError):
        theory.step_time(-1, 0.1, 1)
