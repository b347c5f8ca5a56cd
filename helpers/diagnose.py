"""``python -m helpers.diagnose module:function --steps 200``: the command line of
:func:`helpers.diagnose` (the code is in :mod:`helpers.diagnosis`; this module only runs it,
so that ``helpers.diagnose`` stays the function)."""

import sys

from helpers.diagnosis import main

if __name__ == "__main__":
    sys.exit(main())
