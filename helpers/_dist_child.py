"""One rank of notebook 17's data-parallel run, started by torchrun (see
:mod:`helpers.data.distributed`): a DataLoader over a DistributedSampler, recorded, with an
all_reduce at the end of every step; writes what it saw to ``out/rank<r>.json``."""

import json
import os
import sys
from time import perf_counter as clock

import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

from helpers.data.distributed.ranks import SetEpochSampler, SlowIds, SyncStep
from helpers.timing.recorder import record


def main(config: dict) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dataset = SlowIds(
        config["n"], config["load_s"], slow_rank=config["slow_rank"], slow_factor=config["slow_factor"]
    )
    kind = SetEpochSampler if config["set_epoch"] else DistributedSampler
    sampler = kind(
        dataset, num_replicas=world, rank=rank, shuffle=True, seed=0, drop_last=config["drop_last"]
    )
    loader = DataLoader(
        dataset, batch_size=config["batch_size"], sampler=sampler, num_workers=config["workers"][str(rank)]
    )
    step = SyncStep(config["step_s"], config["kill_step"] if config["kill_rank"] == rank else None)
    origin = clock()
    timeline = record(loader, step, epochs=config["epochs"], progress=False)
    per_epoch = len(sampler)
    ids = [step.ids[e * per_epoch : (e + 1) * per_epoch] for e in range(config["epochs"])]
    spans = [(s - origin, e - origin) for s, e in step.spans]
    with open(os.path.join(config["out"], f"rank{rank}.json"), "w") as f:
        json.dump(
            {
                "rank": rank,
                "origin": origin,
                "timeline": timeline.to_dict(),
                "ids": ids,
                "sync_waits": step.waits,
                "sync_spans": spans,
            },
            f,
        )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
