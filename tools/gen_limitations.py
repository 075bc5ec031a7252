"""Regenerate limitations/LIMITATIONS.md from the rule registry.

    python tools/gen_limitations.py           # write the table
    python tools/gen_limitations.py --check   # exit 1 when the committed table is stale
"""
from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import lowering_rules  # noqa: E402,F401  (registers every rule)
from limitations import table  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the table is stale, write nothing")
    parser.add_argument("--output", default=table.TABLE_PATH, help="where the table lives")
    args = parser.parse_args(argv)
    if args.check:
        if table.is_fresh(args.output):
            print(f"{args.output} is up to date")
            return 0
        print(f"{args.output} is stale: run `{table.REGENERATE}` and commit the result", file=sys.stderr)
        return 1
    changed = table.write(args.output)
    print(f"{'wrote' if changed else 'unchanged:'} {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
