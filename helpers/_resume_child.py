"""Entry point of notebook 15's training child: ``python -m helpers._resume_child CONFIG_JSON``
(see :func:`helpers.data.resume.train`). A module of its own, so that ``helpers.data.resume`` is
imported once, by name, in the child too."""

import json
import sys

from helpers.data.resume import train

if __name__ == "__main__":
    train(json.loads(sys.argv[1]))
