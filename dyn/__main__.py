import sys

from .presentation.cli import main

sys.exit(main())
