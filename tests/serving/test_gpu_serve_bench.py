"""serve-bench measuring a real GPU with NVML (``pytest -m gpu`` on a GPU machine): the tests'
server runs GPU kernels during one request's prefill, and that request gets their energy."""

import json
import time

import pytest

import energyframe as ef
from energyframe.serving import read_requests
from tests.serving.server import FakeServer

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def gemm():
    assert torch.cuda.is_available(), "this test needs a CUDA GPU"
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)

    def work(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for _ in range(8):
                torch.matmul(a, b, out=c)
            torch.cuda.synchronize()

    work(1.0)  # clocks and power up once, then idle again before the run
    return work


def test_the_gpu_work_of_one_requests_prefill_is_that_requests_energy(tmp_path, gemm):
    """Three requests decode for ~2.5 s with the GPU idle; request x's prefill is 0.6 s of bf16
    GEMMs (~700 W on an H200). Its prefill window is that burst, and its prompt weighs 100
    tokens against the decoders' one each: x's dynamic energy must hold most of the run's, each
    decoder little of it, and the load's segments
    must add up to its own window within the bound."""
    filler = " ".join(["w"] * 96)
    lines = [{"prompt": f"d{i} @gap=0.05 @tokens=50", "id": f"d{i}", "arrival_s": 0.0} for i in range(3)]
    lines.append({"prompt": f"{filler} @work=0.6 @ttft=0 @gap=0.6 @tokens=3", "id": "x", "arrival_s": 0.8})
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps(line) for line in lines))
    out = tmp_path / "run"
    with FakeServer(usage="always", work=gemm) as server:
        result = ef.serve_bench(server.url, str(prompts), power=["nvml"], out=out, idle_s=2.0, reporters=[])
    frame = read_requests(out).set_index("request_id")
    assert set(frame["status"]) == {"ok"} and frame.loc["x", "prompt_tokens"] == 100
    conservation = result.derived_table("conservation").rows[0]
    assert conservation["within_bound"] is True, conservation
    x = frame.loc["x"]
    total_dynamic = frame["dynamic_energy_j"].sum()
    # the GPU's power falls off over a few hundred ms after the burst: shared by all four then
    assert x["dynamic_energy_j"] >= 0.8 * total_dynamic, frame[["dynamic_energy_j", "prefill_energy_j"]]
    assert frame.loc[["d0", "d1", "d2"], "dynamic_energy_j"].max() < 0.1 * x["dynamic_energy_j"]
    assert x["prefill_energy_j"] >= 0.8 * x["energy_j"]
    assert (frame["energy_bound_j"] < 0.1 * frame["energy_j"]).all()
