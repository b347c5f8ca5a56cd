"""Plain Python to copy into a training script: the share of the time a loop waits for data (notebook
00b, README), n, y and m measured by hand (notebooks 02 and 19), and what a loader sends its workers
that they cannot import (notebook 20). Each function imports only the standard library; the notebooks
show them as code blocks kept equal to this module."""

from __future__ import annotations

import multiprocessing
import statistics
import time


def wait_share(wait_s, step_s, skip=1):
    """The share of the loop's time spent waiting in next(), leaving out the first `skip` batches:
    they include starting the workers (with x workers, skip the first x)."""
    skip = max(1, skip)
    waited, stepped = sum(wait_s[skip:]), sum(step_s[skip:])
    return waited / (waited + stepped)


def measure_n_y_m(loader, step, batches=4):
    """Medians in seconds: n, one batch built in this process as a worker builds it; y, the step;
    m, next() on a batch already waiting for the loop (its share of the hand-over). The loader
    needs workers and a batch size."""
    n_s, y_s = [], []
    indices = iter(loader.batch_sampler)
    for _ in range(batches):
        t0 = time.perf_counter()
        batch = loader.collate_fn([loader.dataset[i] for i in next(indices)])
        t1 = time.perf_counter()
        step(batch)
        n_s.append(t1 - t0)
        y_s.append(time.perf_counter() - t1)
    n = statistics.median(n_s)
    return n, statistics.median(y_s), next_when_ready(loader, 2 * n, batches)


def next_when_ready(loader, wait_s, batches=4):
    """Median seconds of next() on a batch a worker built while the loop slept wait_s: what is left
    is the loop taking it in, m."""
    batches_in, m_s = iter(loader), []
    next(batches_in)  # starts the workers: the first batch also waits for them
    for _ in range(batches):
        time.sleep(wait_s)
        t0 = time.perf_counter()
        next(batches_in)
        m_s.append(time.perf_counter() - t0)
    return statistics.median(m_s)


def unimportable_parts(loader):
    """What a loader sends its workers that they cannot import by name, as {part: why}. Under spawn
    and forkserver each worker unpickles its dataset, collate_fn and worker_init_fn, importing each by
    name. Empty under fork (the workers inherit them) and with no workers."""
    context = loader.multiprocessing_context
    method = context.get_start_method() if context is not None else multiprocessing.get_start_method()
    if loader.num_workers == 0 or method == "fork":
        return {}
    import __main__

    notebook = not hasattr(__main__, "__file__")  # a notebook's __main__ has no file to import
    found = {}
    for part in ("dataset", "collate_fn", "worker_init_fn"):  # the sampler stays in this process
        obj = getattr(loader, part)
        target = obj if callable(obj) and hasattr(obj, "__qualname__") else type(obj)
        qualname, module = getattr(target, "__qualname__", ""), getattr(target, "__module__", "")
        if "<lambda>" in qualname:
            found[part] = "is a lambda"
        elif "<locals>" in qualname:
            found[part] = f"is defined inside a function ({qualname})"
        elif module == "__main__" and notebook:
            found[part] = f"is defined in a notebook cell ({qualname})"
    return found
