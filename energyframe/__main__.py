"""``python -m energyframe`` and the ``energyframe`` command.

The command line is loaded here, inside a function, so that a Ctrl-C while it loads (its
imports take a few tenths of a second) is one line and exit 130, as one later is, never a
``KeyboardInterrupt`` traceback."""

from __future__ import annotations

import sys


def main() -> None:
    """Load the command line and run it."""
    try:
        from .cli import main as command_line
    except KeyboardInterrupt:
        sys.stderr.write("Error: interrupted by SIGINT while energyframe started; nothing was done\n")
        sys.exit(130)
    command_line()


if __name__ == "__main__":
    main()
