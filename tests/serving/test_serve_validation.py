"""benchmarks/serve_validation.py's parts on the CPU: its (a), (b) and (c) against the tests'
server with constant replayed power, on a schedule twenty times faster. The numbers mean nothing
here (the fake server draws no power); the script's runs, comparisons and tables must work."""

import json

import pytest

from tests.conftest import load_benchmark, write_power_csv
from tests.serving.server import FakeServer

pytestmark = pytest.mark.slow  # several short runs


def test_the_validation_runs_and_writes_its_tables(tmp_path):
    bench = load_benchmark("serve_validation")
    csv = write_power_csv(tmp_path / "power.csv", 100.0, period_s=0.01, duration_s=2.0)
    with FakeServer(ttft_s=0.01, gap_s=0.002, usage="always") as server:
        target = bench.Target(
            server.url, "tiny", (f"replay:file={csv},loop=true",), time_scale=0.05, idle_s=0.2
        )
        report = bench.validate(tmp_path, target, {"a", "b"}, repeats=1)
    text = bench.write_report(report, tmp_path)
    assert [r["n"] for r in report["identical"]] == [8]
    assert [(r["kind"], r["k_ok"]) for r in report["marginal"]] == [
        ("W+K prefill overlapping", 4),
        ("W+K decode after", 4),
        ("W+K long decode after", 4),
        ("W+K long decode overlapping", 4),
        ("W+K decode overlapping", 4),
    ]
    # each kind over its repeats, with W's own run-to-run spread (one repeat here: none to tell)
    assert [r["kind"] for r in report["marginal_pooled"]] == [r["kind"] for r in report["marginal"]]
    for row in report["marginal"]:  # constant power: the K requests add only the span's difference
        assert row["measured_difference_j"] == pytest.approx(0.0, abs=2.0)
        assert row["attributed_dynamic_j"] == pytest.approx(0.0, abs=1e-6)
        # a replayed constant power has no random part: the difference's bound is the
        # baselines' own, far below the 5-W accuracy times the span that it held before
        assert 0.0 <= row["difference_bound_j"] < 0.5
    kinds = {(r["run"], r["kind"]) for r in report["leaderboard"]}
    assert ("WK-prefill-overlapping-0", "K") in kinds and ("WK-decode-after-0", "ordinary") in kinds
    assert "## (b) marginal truth" in text and "### (b) over the repeats" in text and (tmp_path / "serve_validation.md").read_text().startswith(
        "# serve-bench"
    )
    assert json.loads((tmp_path / "serve_validation.json").read_text())["parts"] == ["a", "b"]


def test_the_model_the_validation_serves_is_built_without_a_hub(tmp_path):
    """The script's set-up on the CPU, at a tiny size: the tokenizer makes each synthetic word
    one token, the chat template renders, the saved model loads and generates past its EOS."""
    pytest.importorskip("transformers")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from energyframe.serving.prompts import load_prompts

    bench = load_benchmark("serve_validation")
    tiny = {
        **bench.SHAPE,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
    }
    bench.build_model(tmp_path / "model", shape=tiny, vocab=2048, device="cpu")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "model")
    prompt = load_prompts("synthetic:prompt_tokens=50", 1)[0].text
    assert len(tokenizer(prompt)["input_ids"]) == 50
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
    )
    assert chat == prompt + "\n"
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "model")
    assert model.config.vocab_size == len(tokenizer) and model.generation_config.eos_token_id is None
    out = model.generate(torch.tensor([tokenizer(prompt)["input_ids"]]), max_new_tokens=12, do_sample=False)
    assert out.shape[1] == 50 + 12
