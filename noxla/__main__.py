"""`python -m noxla` is the `noxla` command."""
import sys

from noxla.cli import main

sys.exit(main())
