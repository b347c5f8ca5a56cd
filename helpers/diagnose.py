"""``python -m helpers.diagnose module:function``: the same command as ``dataloader-lab diagnose``
(:mod:`helpers.cli`), where ``helpers`` is the lab's package. Never imported as a module, so that
``helpers.diagnose`` stays the function."""

import sys

from helpers.cli import diagnose_main

if __name__ == "__main__":
    sys.exit(diagnose_main(prog="python -m helpers.diagnose"))
