"""Workloads, the modelled accelerator and the real models."""

import time

import pytest
import torch

import helpers
from conftest import make_loader


def test_sleep_costs_wait_and_busy_costs_cpu():
    dataset = helpers.WorkDataset(2, item_wait_s=0.05)
    wall, cpu = time.perf_counter(), time.thread_time()
    dataset[0]
    assert time.perf_counter() - wall >= 0.05 and time.thread_time() - cpu < 0.02
    dataset = helpers.WorkDataset(2, item_cpu_s=0.05)
    cpu = time.thread_time()
    dataset[0]
    assert time.thread_time() - cpu >= 0.05


def test_modelled_step_waits_without_using_the_cpu():
    step = helpers.ModelledStep(0.05)
    wall, cpu = time.perf_counter(), time.process_time()
    step(None)
    assert time.perf_counter() - wall >= 0.05
    assert time.process_time() - cpu < 0.02


def test_batched_work_pays_the_request_cost_once_per_batch():
    plain = helpers.WorkDataset(8, request_wait_s=0.02)
    batched = helpers.BatchedWorkDataset(8, request_wait_s=0.02)
    start = time.perf_counter()
    items = [plain[i] for i in range(4)]
    per_item = time.perf_counter() - start
    start = time.perf_counter()
    assert batched.__getitems__([0, 1, 2, 3]) == items
    assert time.perf_counter() - start < per_item / 2


@pytest.mark.untimed
def test_work_dataset_items_carry_their_index():
    assert helpers.WorkDataset(3)[2] == 2
    item = helpers.WorkDataset(3, item_shape=(2, 2))[1]
    assert item.shape == (2, 2) and torch.all(item == 1)


@pytest.mark.untimed
def test_tutorial_datasets_match_in_shape_and_are_repeatable():
    single = helpers.TutorialDataset(8, shape=(3, 8, 8), item_wait_s=0.0)
    batched = helpers.BatchedTutorialDataset(8, shape=(3, 8, 8), item_wait_s=0.0)
    image, label = single[3]
    assert image.shape == (3, 8, 8) and 0 <= label < 10
    assert torch.equal(single[3][0], image)
    items = batched.__getitems__([0, 1, 2])
    assert [x.shape for x, _ in items] == [(3, 8, 8)] * 3
    assert [y for _, y in items] == [single[i][1] for i in range(3)]


@pytest.mark.untimed
def test_tutorial_dataset_loads_under_spawn():
    dataset = helpers.BatchedTutorialDataset(8, shape=(3, 8, 8), item_wait_s=0.0)
    loader = make_loader(dataset, batch_size=4, num_workers=1, prefetch_factor=1,
                                 start_method="spawn")
    images, labels = next(iter(loader))
    assert images.shape == (4, 3, 8, 8) and labels.shape == (4,)


def test_straggler_dataset_slows_one_item_in_every():
    dataset = helpers.WorkDataset(10, item_wait_s=0.01, slow_every=5, slow_factor=5)
    assert [i for i in range(10) if dataset.is_slow(i)] == [0, 5]
    assert dataset.mean_item_s() == pytest.approx(0.01 * (1 + 4 / 5))


@pytest.mark.untimed
def test_mnist_like_is_learnable_shape():
    data = helpers.mnist_like(100)
    x, y = data[:]
    assert x.shape == (100, 784) and y.dtype == torch.int64 and int(y.max()) < 10


@pytest.mark.parametrize("model, inputs", [
    (lambda: helpers.TutorialNet(), torch.randn(2, 3, 64, 64)),
    (lambda: helpers.ForumMLP(), torch.randn(2, 784)),
])
@pytest.mark.untimed
def test_real_models_produce_ten_logits(model, inputs):
    assert model()(inputs).shape == (2, 10)


@pytest.mark.untimed
def test_train_step_lowers_the_loss():
    torch.manual_seed(0)
    x, y = helpers.mnist_like(256)[:]
    step = helpers.TrainStep(helpers.ForumMLP(), "cpu", lr=0.05, momentum=0.9)
    for _ in range(30):
        step((x, y))
    losses = step.losses()
    assert len(losses) == 30 and losses[-1] < losses[0]


@pytest.mark.untimed
def test_hand_over_batches_are_many_tensors_or_one_and_load_under_spawn():
    many = helpers.HandOverDataset(2, 4, 8)[0]
    one = helpers.HandOverDataset(2, 4, 8, stacked=True, dtype=torch.uint8)[1]
    assert len(many[0]) == 4 and len({t.untyped_storage().data_ptr() for t in many[0]}) == 4
    assert one[0].shape == (4, 8) and one[0].dtype == torch.uint8 and one[1].shape == (4,)
    with pytest.raises(IndexError):
        helpers.HandOverDataset(2, 4, 8)[2]
    loader = make_loader(helpers.HandOverDataset(2, 4, 8), batch_size=None, num_workers=1,
                         start_method="spawn")
    assert [len(samples) for samples, _ in loader] == [4, 4]


def test_threaded_batches_come_from_threads_in_order():
    dataset = helpers.ThreadedBatches(6, 4, 8, threads=3, wait_s=0.02)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None)
    list(loader)  # once untimed: the first run imports torchdata.nodes and starts its threads
    start = time.perf_counter()
    batches = list(loader)
    assert len(batches) == 6 and batches[0][0].shape == (4, 8)
    assert time.perf_counter() - start < 6 * 0.02  # three threads wait side by side


def test_threaded_batches_leave_no_stall_for_a_later_epoch():
    # torchdata stops a thread mapper's threads only when the garbage collector frees its iterator, and
    # then waits up to 0.1 s (its queue timeout) for them on whichever thread collects: back to back,
    # every third epoch of two batches took ~100 ms here against ~11 (10 of 30). ThreadedBatches stops
    # them as each epoch ends, from a thread of its own.
    loader = torch.utils.data.DataLoader(helpers.ThreadedBatches(2, 1, 4, threads=3), batch_size=None)
    epochs = []
    for _ in range(30):
        start = time.perf_counter()
        assert len(list(loader)) == 2
        epochs.append(time.perf_counter() - start)
    median = sorted(epochs)[len(epochs) // 2]
    stalled = [round(e * 1e3) for e in epochs if e > median + 0.05]
    assert len(stalled) <= 2, (stalled, round(median * 1e3))


def test_host_device_step_overlaps_only_when_the_loss_is_read_rarely():
    every = helpers.HostDeviceStep(0.002, 0.01, sync_every=1)
    rarely = helpers.HostDeviceStep(0.002, 0.01, sync_every=5)
    for step in (every, rarely):
        start = time.perf_counter()
        for _ in range(5):
            step(None)
            time.sleep(0.008)  # the main process's own work between steps, overlappable
        step.elapsed = time.perf_counter() - start
    assert every.elapsed >= 5 * (0.002 + 0.01 + 0.008)
    assert rarely.elapsed < every.elapsed - 0.02
    with pytest.raises(ValueError):
        helpers.HostDeviceStep(-1, 0)
