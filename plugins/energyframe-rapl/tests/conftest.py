import sys
from pathlib import Path

# the plugin's tests run from a checkout without installing it (its own test installs it for real)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
