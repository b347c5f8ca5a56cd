"""What every notebook shows around its measurements: ``checks`` (the lesson checks' framework:
:class:`Check`, :class:`Expected`, :func:`show_checks`, ``holds``/``near``/``at_least``…),
``predict`` (a learner's prediction before a run) and ``setup_check`` (notebook 00's environment
checks).

Not under ``helpers/lessons/``: every module there is a lesson topic, and the tests read the ids
of the lesson checks from that folder's source.

May import: ``helpers.config``, ``helpers.cores``, ``helpers.system``, ``helpers.models``,
``helpers.timing``, ``helpers.data`` and ``helpers.classroom``.
"""
