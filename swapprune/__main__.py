import sys

from swapprune.cli import main

sys.exit(main())
