"""Measure CPU work against a recorded power profile (the ``replay`` source).

Writes a synthetic profile (a 300 W plateau sampled every 20 ms), replays it as a live
source, and shows that every window's mean power is what the profile says.
"""

import tempfile
import time
from pathlib import Path

import energyframe as ef


def main():
    folder = Path(tempfile.mkdtemp())
    profile = folder / "power.csv"
    now = time.time()
    profile.write_text("time_s,power_w\n" + "".join(f"{now + 0.02 * i!r},300.0\n" for i in range(100)))
    result = ef.run(
        "cpu-matmul:sizes=128",
        power=[f"replay:file={profile},loop=true"],
        reporters=["console"],
        out=folder / "run",
        settings=ef.RunSettings(trials=3, min_window_s=0.2, warmup_s=0.1),
    )
    print("mean power per window:", list(result.windows["mean_power_w"].round(6)))


if __name__ == "__main__":
    main()
