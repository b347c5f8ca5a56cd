"""LoaderSettings: one type for a DataLoader's knobs, with errors that name the fix."""

import pytest

import helpers
from conftest import make_loader


@pytest.mark.parametrize("kwargs, fix", [
    (dict(num_workers=0, prefetch_factor=2), "Set prefetch_factor=None, or set num_workers > 0"),
    (dict(num_workers=0, persistent_workers=True), "Set persistent_workers=False"),
    (dict(num_workers=-1), "num_workers must be an integer >= 0"),
    (dict(num_workers=2, prefetch_factor=0), "prefetch_factor must be a positive integer"),
    (dict(batch_size=0), "batch_size must be a positive integer"),
    (dict(num_workers=1, start_method="thread"), "choose one of"),
])
def test_bad_combinations_name_the_fix(kwargs, fix):
    with pytest.raises(ValueError, match=fix.replace("(", r"\(").replace(")", r"\)")):
        helpers.LoaderSettings(**kwargs)


def test_in_order_false_without_workers_is_accepted_as_pytorch_does():
    # PyTorch accepts in_order=False with 0 workers and ignores it (there is one producer).
    loader = make_loader(helpers.WorkDataset(4), in_order=False)
    assert [int(b) for b in loader] == [0, 1, 2, 3]


def test_good_combination_builds_the_loader_and_reads_back():
    settings = helpers.LoaderSettings(batch_size=2, num_workers=2, prefetch_factor=3, persistent_workers=True,
                                      start_method="spawn")
    loader = settings.loader(helpers.WorkDataset(4))
    assert loader.prefetch_factor == 3
    assert loader.multiprocessing_context.get_start_method() == "spawn"
    assert helpers.LoaderSettings.from_loader(loader) == settings.replace(shuffle=False)
    assert settings.describe() == "num_workers=2, prefetch_factor=3, batch_size=2, persistent_workers, spawn"


def test_the_default_prefetch_factor_is_pytorchs():
    assert helpers.LoaderSettings(num_workers=2).effective_prefetch_factor == 2
    assert helpers.LoaderSettings(num_workers=0).effective_prefetch_factor is None
    assert make_loader(helpers.WorkDataset(4), num_workers=2).prefetch_factor == 2


def test_replace_checks_again():
    with pytest.raises(ValueError, match="prefetch_factor"):
        helpers.LoaderSettings(num_workers=2, prefetch_factor=2).replace(num_workers=0)


def test_datasets_refuse_negative_costs_and_lengths():
    with pytest.raises(ValueError, match="item_wait_s"):
        helpers.WorkDataset(4, item_wait_s=-1.0)
    with pytest.raises(ValueError, match="item_cpu_s"):
        helpers.WorkDataset(4, item_cpu_s=-0.1)
    with pytest.raises(ValueError, match="length"):
        helpers.WorkStream(0)
