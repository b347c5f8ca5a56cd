"""Training-data loaders from several domains, each with one performance cause and its fix.

Each module in ``CASES`` defines ``make_loader()`` (the loader as written) and ``make_fixed_loader()``
(the same loader with the one fix applied), with ``DOMAIN``, ``CAUSE``, ``CAUSE_FUNCTION``,
``CAUSE_CALL``, ``FIX``, ``STEP_MS``, ``BATCH_SIZE`` and ``cleanup()``.
"""

CASES = [
    "audio",
    "text",
    "tabular",
    "images",
    "timeseries",
    "video",
    "pointcloud",
    "recsys",
    "medical",
    "records",
    "graph",
]
