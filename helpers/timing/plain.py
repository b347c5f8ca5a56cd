"""Timing in plain Python, to copy into a training script: the share of the time a loop waits for
data (notebook 00b, README), and n, y and m measured by hand (notebook 02). Each function imports
only the standard library; the notebooks show them as code blocks kept equal to this module."""

from __future__ import annotations

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
    n_s, y_s, m_s = [], [], []
    indices, batches_in = iter(loader.batch_sampler), iter(loader)
    next(batches_in)  # starts the workers: the first batch also waits for them
    for _ in range(batches):
        t0 = time.perf_counter()
        batch = loader.collate_fn([loader.dataset[i] for i in next(indices)])
        t1 = time.perf_counter()
        step(batch)
        t2 = time.perf_counter()
        time.sleep(2 * (t1 - t0))  # time for a worker to finish the next batch
        t3 = time.perf_counter()
        next(batches_in)  # already built: what is left is the loop taking it in
        t4 = time.perf_counter()
        n_s.append(t1 - t0)
        y_s.append(t2 - t1)
        m_s.append(t4 - t3)
    return statistics.median(n_s), statistics.median(y_s), statistics.median(m_s)
