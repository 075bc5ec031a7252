"""`python -m noxla.cli`, as `python -m noxla`: the `noxla` command."""
import sys

from noxla.cli import main

sys.exit(main())
