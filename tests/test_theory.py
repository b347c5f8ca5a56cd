"""The step-time model and the schedule simulation."""

import statistics

import pytest

from helpers.timing import theory


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


def test_out_of_order_schedule_skips_a_worker_whose_slots_are_full():
    # 2 workers, 1 slot each, batch 0 slow (1 s), the rest 0.1 s, a 0.05 s step.
    loads = [1.0] + [0.1] * 7
    plan = theory.simulate_out_of_order(8, loads, 0.05, 2, prefetch_factor=1)
    # the loop takes what is done first: worker 1 builds batches 1-7 (0.7 s) before batch 0 ends
    assert [b.index for b in plan] == [1, 2, 3, 4, 5, 6, 7, 0]
    # while worker 0 is stuck on batch 0, every new task goes to worker 1
    stuck_until = next(b.fetch_end for b in plan if b.index == 0)
    assert all(b.worker == 1 for b in plan if 0 < b.index and b.fetch_start < stuck_until)
    assert sorted(b.index for b in plan) == list(range(8))
    # with equal loads it is the in-order schedule: the rotation never meets a full worker
    same = theory.simulate_out_of_order(8, 1.0, 0.25, 2)
    in_order = theory.simulate(8, 1.0, 0.25, 2)
    assert theory.simulated_intervals(same) == pytest.approx(theory.simulated_intervals(in_order))
    assert [b.worker for b in same] == [0, 1] * 4
    with pytest.raises(ValueError, match="needs workers"):
        theory.simulate_out_of_order(4, 0.1, 0.1, 0)


def test_an_out_of_order_timeline_keeps_the_samplers_batch_in_indices():
    plan = theory.simulate_out_of_order(8, [1.0] + [0.1] * 7, 0.05, 2, prefetch_factor=1)
    tl = theory.as_timeline(plan)
    assert [b.index for b in tl.batches] == list(range(8))
    assert [b.indices[0] for b in tl.batches] == [b.index for b in plan]


def _record(worker=0, wait_start=0.0, ready=1.0, **times):
    from helpers.timing.timeline import BatchRecord

    return BatchRecord(epoch=0, index=times.pop("index", 0), worker=worker, fetch_start=0.0,
                       fetch_end=times.pop("fetch_end", 0.5), wait_start=wait_start, ready=ready,
                       step_end=ready + 0.1, worker_seq=0, indices=(0,), pid=1, **times)


def test_one_serial_thread_between_workers_and_loop_sets_the_pace_when_workers_outpace_it():
    # 8 workers build a batch every 20 / 8 = 2.5 ms against a 5 ms step: without the pin thread the
    # step sets the pace; a pin thread that takes 8 ms a batch sets it instead (notebook 11 on a GPU)
    free = theory.simulated_intervals(theory.simulate(60, 0.02, 0.005, 8))
    pinned = theory.simulated_intervals(theory.simulate(60, 0.02, 0.005, 8, serial_s=0.008))
    assert statistics.median(free[20:]) == pytest.approx(0.005)
    assert statistics.median(pinned[20:]) == pytest.approx(0.008)
    # slower workers than the thread: it changes nothing in the steady pace
    slow = theory.simulate(60, 0.1, 0.005, 2, serial_s=0.008)
    assert statistics.median(theory.simulated_intervals(slow)[20:]) == pytest.approx(
        statistics.median(theory.simulated_intervals(theory.simulate(60, 0.1, 0.005, 2))[20:]))
    with pytest.raises(ValueError, match="serial_s"):
        theory.simulate(4, 0.1, 0.1, 2, serial_s=-1)


def test_the_serial_thread_s_work_is_what_the_pin_or_prefetch_thread_did_per_batch():
    from helpers.timing.timeline import EpochRecord, Span, Timeline

    def timeline(*batches, spans=()):
        epoch = EpochRecord(epoch=0, iter_start=0.0, iter_end=0.0, first_ready=1.0, end=2.0)
        return Timeline(batches=list(batches), epochs=[epoch], config={}, spans=list(spans))

    # the pin thread received (1 ms) and pinned (7 ms) it
    pinned = _record(received_start=0.7, received_end=0.701, pin_start=0.701, pin_end=0.708)
    assert theory.measured_serial_s(timeline(pinned)) == pytest.approx(0.008)
    # the loop's own thread received it: that is m, no serial thread
    assert theory.measured_serial_s(timeline(_record(received_start=0.9, received_end=0.95))) == 0.0
    assert theory.measured_serial_s(timeline(_record(worker=-1, fetch_end=0.98))) == 0.0
    # a prefetch thread received it (its copy on the GPU is no host work)
    copy = Span("copy stream", "copy", 0.6, 1.2, 0, 0)
    assert theory.measured_serial_s(timeline(_record(received_start=0.5, received_end=0.52),
                                             spans=[copy])) == pytest.approx(0.02)
    # the device's own steps are not a thread of the host
    step = Span("device (loop's stream)", "step", 1.0, 1.1, 0, 0)
    assert theory.measured_serial_s(timeline(_record(received_start=0.5, received_end=0.52),
                                             spans=[step])) == 0.0


def test_m_is_the_loops_own_time_once_the_batch_is_its_to_take():
    from helpers.timing.timeline import EpochRecord, Span, Timeline

    def timeline(*batches, spans=()):
        epoch = EpochRecord(epoch=0, iter_start=0.0, iter_end=0.0, first_ready=1.0, end=2.0)
        return Timeline(batches=list(batches), epochs=[epoch], config={}, spans=list(spans))

    # the loop's thread unpickles: from received_start (after the loop began waiting) to ready
    unpickled = _record(received_start=0.9, received_end=0.95)
    assert theory.measured_main_s(timeline(unpickled)) == pytest.approx(0.1)
    # 0 workers: from the end of the fetch
    assert theory.measured_main_s(timeline(_record(worker=-1, fetch_end=0.98))) == pytest.approx(0.02)
    # the pin thread unpickled and pinned it: only the hand-over from its queue is the loop's
    pinned = _record(received_start=0.7, received_end=0.75, pin_start=0.75, pin_end=0.99)
    assert theory.measured_main_s(timeline(pinned)) == pytest.approx(0.01)
    # ...and when it was pinned before the loop asked, the whole next() call is the loop's
    early = _record(wait_start=0.97, received_start=0.5, received_end=0.6, pin_start=0.6, pin_end=0.7)
    assert theory.measured_main_s(timeline(early)) == pytest.approx(0.03)
    # a prefetch thread that received it and then worked on it (host-timed)
    behind = _record(received_start=0.5, received_end=0.6)
    thread = Span("prefetch thread", "transform", 0.6, 0.995, 0, 0)
    assert theory.measured_main_s(timeline(behind, spans=[thread])) == pytest.approx(0.005)
    # a transform in the loop's own thread stays in m
    loop = Span("transform (loop thread)", "transform", 0.6, 0.99, 0, 0)
    assert theory.measured_main_s(timeline(_record(received_start=0.5, wait_start=0.4, received_end=0.6),
                                           spans=[loop])) == pytest.approx(0.5)
    # a copy timed on the GPU: the host had the batch once the prefetch thread received it
    gpu = Span("copy stream", "copy", 0.6, 1.2, 0, 0)
    assert theory.measured_main_s(timeline(_record(received_start=0.5, received_end=0.96),
                                           spans=[gpu])) == pytest.approx(0.04)
