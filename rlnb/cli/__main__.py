"""``python -m rlnb.cli ...``: the ``rlnb`` console script without the installed entry point (tests and
``rlnb.testing.ServerProcess`` start the server this way, with the interpreter they run under)."""

import sys

from rlnb.cli import main

sys.exit(main())
