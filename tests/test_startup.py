"""``energyframe --help`` and ``list`` never import torch (a fast start)."""

import subprocess
import sys

import pytest

PROBE = """
import sys
from energyframe.cli import main
try:
    main({args!r})
except SystemExit:
    pass
heavy = sorted(m for m in ("torch", "torchvision", "transformers", "pynvml", "serial") if m in sys.modules)
print("HEAVY:" + ",".join(heavy), file=sys.stderr)
"""


@pytest.mark.parametrize("args", [["--help"], ["list"], ["run", "--help"], ["show", "--help"]])
def test_cli_does_not_import_heavy_modules(args):
    proc = subprocess.run([sys.executable, "-c", PROBE.format(args=args)], capture_output=True, text=True)
    assert "HEAVY:\n" in proc.stderr, proc.stderr


def test_help_does_not_import_pandas():
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(args=["--help"]) + "\nprint('pandas' in sys.modules)"],
        capture_output=True,
        text=True,
    )
    assert proc.stdout.strip().endswith("False")
