"""The `noxla` command (``main``): its arguments (``noxla.cli.parser``), `export`
(``noxla.cli.export``), `check`, `serve`, `limitations` and `llm-export` (``noxla.cli.commands``),
what they read from their arguments (``noxla.cli.inputs``) and print (``noxla.cli.report``). Here:
the command's output kept its own while TF and the converters write to the terminal."""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from typing import Sequence

from noxla.cli.parser import build_parser


@contextlib.contextmanager
def own_output():
    """The command's output is its own: TF, XLA, absl and the converters write log lines from C++
    straight to file descriptors 1 and 2 (TF_CPP_MIN_LOG_LEVEL does not reach absl's early
    logging). Both descriptors point at a scratch file while the command runs; the command prints
    to the streams yielded, which keep the real ones. The scratch is replayed on stderr when the
    command fails with an unexpected exception (a noxla bug), where it may explain what went wrong."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    out = os.fdopen(os.dup(saved[0]), "w", buffering=1)
    err = os.fdopen(os.dup(saved[1]), "w", buffering=1)
    with tempfile.TemporaryFile() as scratch:
        os.dup2(scratch.fileno(), 1)
        os.dup2(scratch.fileno(), 2)
        replay = False
        try:
            yield out, err
        except Exception:
            replay = True
            raise
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, original in zip((1, 2), saved):
                os.dup2(original, fd)
                os.close(original)
            out.close()
            err.close()
            if replay:
                scratch.seek(0)
                sys.stderr.write(scratch.read().decode(errors="replace"))


def main(argv: Sequence[str] | None = None) -> int:
    # TF's C++ start-up chatter (CUDA plugin registration on a CPU machine) is noise to a CLI user;
    # what this setting does not silence, own_output keeps off the terminal.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    args = build_parser().parse_args(argv)
    if args.command == "limitations":  # no TF, nothing to silence
        return args.run(args, sys.stdout, sys.stderr)
    with own_output() as (out, err):
        _quiet_python_logging()
        from noxla.errors import NoxlaError
        try:
            return args.run(args, out, err)
        except NoxlaError as e:
            print(f"noxla: error: {e}" if not str(e).startswith("noxla") else str(e), file=err)
            return 1


def _quiet_python_logging() -> None:
    """absl's and TF's Python loggers write to stderr, which is scratch now; they also buffer."""
    import logging
    logging.getLogger("absl").setLevel(logging.ERROR)
    logging.getLogger("tensorflow").setLevel(logging.ERROR)


if __name__ == "__main__":
    sys.exit(main())
