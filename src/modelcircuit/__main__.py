"""`python -m modelcircuit`: the console command (entry.py)."""

import sys

from .entry import main

sys.exit(main())
