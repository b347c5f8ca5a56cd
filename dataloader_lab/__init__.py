"""The lab's package under a second name, for the command line (``dataloader-lab``): its modules are
the files of ``helpers/``, loaded as ``dataloader_lab.*``. A project with a ``helpers`` of its own can
then run the diagnosis and keep its own ``helpers`` (``helpers/cli.py`` says how)."""

import os

__path__ = [os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "helpers")]
