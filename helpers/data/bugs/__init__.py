"""Bugs that don't crash (notebook 18): the workloads that show them and their fixes.

- ``randomness``: "random" augmentations drawn in workers — NumPy's global generator, a generator
  made in ``__init__`` (copied into every worker), and two fixes: reseeding it from the worker's
  seed in ``worker_init_fn``, and a seed per sample from ``(epoch, index)``;
- ``streams``: an ``IterableDataset`` that forgets to shard, one that shards with
  ``get_worker_info()``, and what each worker's short last batch does with ``drop_last``;
- ``compiled``: a small model trained through ``torch.compile`` on CPU, and the ragged last batch
  that recompiles it (with three fixes: ``drop_last``, padding, a dynamic batch dimension).

This ``__init__`` imports nothing: a worker that unpickles a dataset imports only its module.
"""
