"""Record what a real GPU's sensors print, for the CPU tests' fakes to replay.

Writes into ``--out``: ``nvidia-smi-help-query-gpu.txt`` (the field list the nvidia-smi source
parses), ``nvidia-smi-sample.csv`` (a second of real ``-lms 20`` output) and
``nvml-ticks.json`` (energy-counter ticks recorded by the nvml source over 2 s idle and 3 s of
GEMM load: seconds and millijoules since the first tick). Copy them to tests/fixtures/.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_load import gemm_step, run_for  # noqa: E402

from energyframe.plugin import SourceContext  # noqa: E402
from energyframe.power.nvml import NVMLPowerSource  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    help_text = subprocess.run(["nvidia-smi", "--help-query-gpu"], capture_output=True, text=True).stdout
    (out / "nvidia-smi-help-query-gpu.txt").write_text(help_text)
    fields = "timestamp,index,uuid,power.draw.instant,power.draw,power.draw.average,clocks.sm,clocks.mem,temperature.gpu,clocks_event_reasons.active"
    proc = subprocess.Popen(
        ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,nounits", "-lms", "20", "-i", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.0)
    proc.terminate()
    (out / "nvidia-smi-sample.csv").write_text(proc.communicate()[0])

    step, sync = gemm_step()
    source = NVMLPowerSource(name="nvml", gpus="0", channels="state")
    source.start(SourceContext())
    time.sleep(2.0)
    run_for(step, sync, 3.0)
    time.sleep(0.3)
    ticks = [s for s in source.read() if s.channel == "gpu0"]
    source.stop()
    ticks += [s for s in source.read() if s.channel == "gpu0"]
    t0, e0 = ticks[0].time_s, ticks[0].value
    (out / "nvml-ticks.json").write_text(
        json.dumps(
            {
                "device": source.info()["gpus"][0]["name"],
                "driver": source.info()["driver_version"],
                "date": time.strftime("%Y-%m-%d"),
                "what": "2 s idle, then 3 s of bf16 GEMM load",
                "ticks": [[round(s.time_s - t0, 6), round((s.value - e0) * 1e3)] for s in ticks],
            }
        )
    )
    print(f"recorded {len(ticks)} ticks, help text {len(help_text)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
