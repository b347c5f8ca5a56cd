"""The image pipeline's pieces: JPEGs made here decode to what was drawn, the tar shard gives
the same bytes as the files, transforms and threads behave, normalising on the device is
right, and bad input names the fix."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

import helpers

# torchvision (helpers.data.images imports it) is imported inside the tests that use it: importing it
# imports torch._dynamo (~1.2 s), and every pytest process that collects this file would pay it.


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("jpegs")
    paths, labels = helpers.make_jpegs(folder / "files", 12, 64, classes=3)
    return paths, labels, helpers.pack_tar(paths, folder / "shard.tar")


@pytest.mark.untimed
def test_jpegs_decode_to_what_was_drawn(jpegs):
    from torchvision.io import decode_jpeg

    from helpers.data.images import synthetic_image

    paths, labels, _ = jpegs
    assert labels == [i % 3 for i in range(12)]
    decoded = decode_jpeg(torch.frombuffer(bytearray(paths[5].read_bytes()), dtype=torch.uint8))
    drawn = synthetic_image(5, 64)
    assert decoded.shape == (3, 64, 64)
    assert (decoded.float() - drawn.float()).abs().mean() < 12  # JPEG at quality 90: small error
    assert not torch.equal(synthetic_image(5, 64), synthetic_image(6, 64))
    assert torch.equal(synthetic_image(5, 64), drawn)  # the same index draws the same picture


@pytest.mark.untimed
def test_the_shard_holds_the_same_bytes_as_the_files(jpegs):
    paths, labels, shard = jpegs
    names, offsets, sizes = helpers.tar_index(shard)
    assert names == [p.name for p in paths] and offsets.dtype.kind == "i"
    files = helpers.JpegDataset(paths, labels)
    packed = helpers.JpegDataset(shard, labels)
    assert packed.source == "tar shard" and files.source == "files"
    for i in (0, 7, 11):
        assert packed.read_bytes(i) == files.read_bytes(i) == paths[i].read_bytes()
        assert torch.equal(packed[i][0], files[i][0]) and int(packed[i][1]) == labels[i]


def test_loader_batches_uint8_crops_from_workers_and_threads(jpegs):
    paths, labels, shard = jpegs
    for source, workers, threads in ((paths, 2, 1), (shard, 1, 3), (shard, 0, 2)):
        dataset = helpers.JpegDataset(source, labels, transform=helpers.train_transform(32), threads=threads)
        batches = list(DataLoader(dataset, batch_size=4, num_workers=workers))
        images = torch.cat([b[0] for b in batches])
        assert images.shape == (12, 3, 32, 32) and images.dtype == torch.uint8
        assert torch.cat([b[1] for b in batches]).tolist() == labels


def test_threads_decode_a_batch_in_a_pool(jpegs):
    paths, labels, _ = jpegs
    dataset = helpers.JpegDataset(paths, labels, threads=3)
    out = dataset.__getitems__([0, 1, 2, 3])
    assert [int(label) for _, label in out] == labels[:4]
    _, _, pool = dataset._process_state()
    assert pool is not None and pool._max_workers == 3


def test_normalize_on_device_matches_normalizing_in_the_worker(jpegs):
    from torchvision.transforms import v2

    from helpers.data.images import MEAN, STD

    paths, labels, _ = jpegs
    images = torch.stack([helpers.JpegDataset(paths, labels)[i][0] for i in range(4)])
    on_device = helpers.normalize_on_device(images, "cpu")
    expected = (images.float() / 255 - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(
        1, 3, 1, 1
    )
    assert on_device.dtype == torch.float32 and torch.allclose(on_device, expected, atol=1e-5)
    assert helpers.batch_nbytes(on_device) == 4 * helpers.batch_nbytes(images)

    worker = v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])(images)
    assert torch.allclose(on_device, worker, atol=1e-5)
    with pytest.raises(TypeError, match="uint8"):
        helpers.normalize_on_device(on_device)


def test_cost_and_rates(jpegs):
    paths, labels, _ = jpegs
    cost = helpers.cost_per_image(
        helpers.JpegDataset(paths, labels, transform=helpers.train_transform(32)), 4
    )
    assert set(cost) == {"read", "decode", "transform"} and all(v > 0 for v in cost.values())
    timeline = helpers.record(
        DataLoader(helpers.JpegDataset(paths, labels), batch_size=3, num_workers=2), progress=False
    )
    span = max(b.ready for b in timeline.batches) - min(b.fetch_start for b in timeline.batches)
    assert helpers.images_per_s(timeline) == pytest.approx(12 / span)
    assert 0 < helpers.decode_rate(timeline) < float("inf")


@pytest.mark.untimed
def test_bad_input_names_the_fix(tmp_path, jpegs):
    paths, labels, _ = jpegs
    with pytest.raises(FileNotFoundError, match="pack_tar"):
        helpers.JpegDataset(tmp_path / "missing.tar", labels)
    with pytest.raises(FileNotFoundError, match="make_jpegs"):
        helpers.JpegDataset([tmp_path / "nope.jpg"], [0])
    with pytest.raises(ValueError, match="one label per image"):
        helpers.JpegDataset(paths, labels[:-1])
    with pytest.raises(ValueError, match="threads"):
        helpers.JpegDataset(paths, labels, threads=0)
    with pytest.raises(ValueError, match="size"):
        helpers.make_jpegs(tmp_path, 1, 4)
    empty = tmp_path / "empty.tar"
    helpers.pack_tar([], empty)
    with pytest.raises(ValueError, match="holds no files"):
        helpers.tar_index(empty)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (runs on the lent GPU machine)")
def test_gpu_decode_rate_measures_both(jpegs):
    paths, _, _ = jpegs
    rates = helpers.gpu_decode_rate(paths, 32, repeats=1)
    assert set(rates) == {"GPU decode + transforms", "CPU, one thread"} and all(r > 0 for r in rates.values())


@pytest.mark.untimed
def test_record_best_interleaves_the_rounds_and_keeps_the_faster_run(monkeypatch):
    # One slow run of 2 workers (663 images/s against 3 workers'
    # 780) would decide "workers beyond the cores add nothing". A disturbance only slows a run down.
    from types import SimpleNamespace

    from helpers.data import images
    from helpers.timing import recorder

    rates = {("a", 0): 500.0, ("b", 0): 900.0, ("a", 1): 800.0, ("b", 1): 700.0, ("a", 2): 1.0}
    calls = []

    def fake_record(loader, step, *, progress):
        calls.append((loader, progress))
        return SimpleNamespace(rate=rates[loader, sum(1 for c in calls if c[0] == loader) - 1])

    monkeypatch.setattr(recorder, "record", fake_record)
    monkeypatch.setattr(images, "decode_rate", lambda tl: tl.rate)
    best = images.record_best({"2": "a", "3": "b"}, None, describe=lambda k: f"{k} workers")
    assert [loader for loader, _ in calls] == ["a", "b", "a", "b"]  # interleaved, not a, a, b, b
    assert calls[0][1] == "2 workers (round 1 of 2)"
    assert {k: tl.rate for k, tl in best.items()} == {"2": 800.0, "3": 900.0}
    images.record_best({"2": "a"}, None, rounds=1, progress=False)
    assert calls[-1] == ("a", False)
    with pytest.raises(ValueError, match="rounds"):
        images.record_best({"2": "a"}, None, rounds=0)
