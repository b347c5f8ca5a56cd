"""make_loader refuses bad combinations with a message that names the fix."""

import pytest

import helpers


@pytest.mark.parametrize("kwargs, fix", [
    (dict(num_workers=0, prefetch_factor=2), "Set prefetch_factor=None, or set num_workers > 0"),
    (dict(num_workers=0, persistent_workers=True), "Set persistent_workers=False"),
    (dict(num_workers=0, in_order=False), "Set in_order=True"),
    (dict(num_workers=-1), "num_workers must be an integer >= 0"),
    (dict(num_workers=2, prefetch_factor=0), "prefetch_factor must be a positive integer"),
    (dict(batch_size=0), "batch_size must be a positive integer"),
    (dict(num_workers=1, start_method="thread"), "choose one of"),
])
def test_bad_combinations_name_the_fix(kwargs, fix):
    with pytest.raises(ValueError, match=fix.replace("(", r"\(").replace(")", r"\)")):
        helpers.make_loader(helpers.SleepDataset(4, 0.0), **kwargs)


def test_good_combination_builds_the_loader():
    loader = helpers.make_loader(helpers.SleepDataset(4, 0.0), batch_size=2, num_workers=2,
                                 prefetch_factor=3, persistent_workers=True,
                                 start_method="spawn")
    assert loader.prefetch_factor == 3
    assert loader.multiprocessing_context.get_start_method() == "spawn"


def test_datasets_refuse_negative_costs():
    with pytest.raises(ValueError, match="load_s"):
        helpers.SleepDataset(4, -1.0)
    with pytest.raises(ValueError, match="item_busy_s"):
        helpers.WorkDataset(4, item_busy_s=-0.1)
