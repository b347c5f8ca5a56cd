"""What every notebook shows around its measurements: ``checks`` (the lesson checks' framework:
:class:`Check`, :func:`show_checks`, ``holds``/``near``/``at_least``…), ``predict`` (a learner's
prediction before a run) and ``setup_check`` (notebook 00's environment checks).

Not under ``helpers/lessons/``: every module there is a lesson topic, and the check recorder of the
tests takes frames under that folder for the checks' call sites.

May import: ``helpers.config``, ``helpers.cores``, ``helpers.system``, ``helpers.models``,
``helpers.timing``, ``helpers.data`` and ``helpers.classroom``.
"""
