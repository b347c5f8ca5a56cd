"""The course's workloads: datasets, stores and the experiments that run them.

- ``datasets`` (the tutorial and work datasets), ``storage`` (SQLite), ``workers`` (epochs and memory
  seen from a worker), ``prefetch`` (device prefetchers), ``transfer`` (pinned-memory experiments),
  ``images`` (JPEG decoding; imports torchvision, so nothing imports it eagerly: spawned workers
  would pay for it), ``copy_on_read/``, ``remote/`` (an S3 store on 127.0.0.1 and ``S3Dataset``),
  ``distributed/`` (torchrun), ``resume``, ``startup``, ``failures``, ``processes``, ``mysteries``,
  ``bugs/`` (notebook 18: random draws in workers, iterable streams, a compiled step);
- one new lesson's workload goes here, in its own module (its checks go in ``helpers/lessons/``).

May import: ``helpers.config``, ``helpers.cores``, ``helpers.system``, ``helpers.models``,
``helpers.timing`` and ``helpers.data``. This ``__init__`` imports nothing (a worker that unpickles a
dataset imports only the module that defines it).
"""
