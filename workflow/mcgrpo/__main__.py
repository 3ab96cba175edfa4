import sys

from mcgrpo.cli import main

sys.exit(main())
