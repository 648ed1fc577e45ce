"""The documentation covers the code it describes (datasette's rule: docs tested against code)."""

import dataclasses
import inspect
import json
import re
import time
from pathlib import Path

import pandas as pd
import pytest

import energyframe as ef
from energyframe import model, plugin
from energyframe.cli import main
from energyframe.core import vocabulary
from energyframe.core.stats import Spread
from energyframe.core.summary import PhaseSummary
from energyframe.core.windows import WINDOW_COLUMNS
from energyframe.kit import registry
from energyframe.lifecycle.config import RunSettings
from energyframe.model import Phase
from energyframe.results.result import RunResult
from energyframe.workloads.kernels import MatmulKernel
from energyframe.workloads.models import ModelWorkload
from energyframe.workloads.perlayer import PerLayer
from energyframe.workloads.pipeline import Pipeline
from tests.fakes import ListWorkload

DOCS = Path(__file__).resolve().parents[1] / "docs"


def mentioned(text: str, name: str) -> bool:
    return re.search(rf"`{re.escape(name)}[`(]", text) is not None


def public_members(cls):
    own = {}
    for klass in cls.__mro__:
        if klass in (object, plugin.Plugin):
            continue
        for name, value in vars(klass).items():
            if not name.startswith("_") and name not in own:
                own[name] = value
    return sorted(own)


@pytest.mark.parametrize("cls", [plugin.PowerSource, plugin.Workload, plugin.Reporter, RunResult])
def test_every_interface_member_is_documented(cls):
    text = (DOCS / "writing-plugins.md").read_text()
    missing = [m for m in public_members(cls) if m != "kind_label" and not mentioned(text, m)]
    assert not missing, f"{cls.__name__} members missing from docs/writing-plugins.md: {missing}"


@pytest.mark.parametrize("cls", [model.Channel, model.Phase, PhaseSummary, Spread])
def test_every_field_is_documented(cls):
    text = (DOCS / "writing-plugins.md").read_text()
    missing = [f.name for f in dataclasses.fields(cls) if not mentioned(text, f.name)]
    assert not missing, f"{cls.__name__} fields missing from docs/writing-plugins.md: {missing}"


def test_every_window_column_and_flag_is_documented():
    text = (DOCS / "result-format.md").read_text()
    flags = [v for k, v in vars(vocabulary).items() if k.isupper() and isinstance(v, str)]
    missing = [c for c in WINDOW_COLUMNS + flags if not mentioned(text, c)]
    assert not missing, f"missing from docs/result-format.md: {missing}"


def test_every_cli_command_and_option_is_documented():
    text = (DOCS / "cli.md").read_text()
    missing = []
    for name, command in main.commands.items():
        if f"energyframe {name}" not in text:
            missing.append(name)
        for param in command.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("--") and opt not in text:
                    missing.append(f"{name} {opt}")
    assert not missing, f"missing from docs/cli.md: {missing}"


def test_every_built_in_reporter_and_source_is_documented():
    documented = {
        # the --reporter row of `energyframe run`'s options lists every reporter
        registry.REPORTERS: lambda name: re.search(
            rf"^\| `--reporter SPEC` \|.*`{re.escape(name)}`", (DOCS / "cli.md").read_text(), re.M
        ),
        registry.POWER: lambda name: re.search(
            rf"^## {re.escape(name)}\b", (DOCS / "power-sources.md").read_text(), re.M
        ),
    }
    for kind, is_documented in documented.items():
        own = [e.name for e in registry.entries(kind) if e.distribution == "energyframe"]
        assert own, kind
        missing = [name for name in own if not is_documented(name)]
        assert not missing, f"{kind} missing from the docs: {missing}"


def test_plugin_base_methods_have_docstrings():
    for cls in (plugin.PowerSource, plugin.Workload, plugin.Reporter):
        for name, member in inspect.getmembers(cls, predicate=inspect.isfunction):
            if not name.startswith("_"):
                assert member.__doc__, f"{cls.__name__}.{name} has no docstring"


# -- every file a run writes ------------------------------------------------------------------
TEMPORARY = re.compile(r"^\.(?P<name>.+)\.[^.]+\.tmp$")  # store's atomic writes: .NAME.XXXX.tmp


def files_in(directory: Path) -> set[str]:
    """Paths of the files under ``directory``, relative, with temporary names as their target."""
    out = set()
    for path in directory.rglob("*"):
        if path.is_file():
            match = TEMPORARY.match(path.name)
            name = match["name"] if match else path.name
            out.add(path.with_name(name).relative_to(directory).as_posix())
    return out


def undocumented(files: set[str]) -> list[str]:
    text = (DOCS / "result-format.md").read_text()
    return sorted(f for f in files if f"`{f}`" not in text)


def snapshot_phase(out: Path, seen: set[str], name: str = "snapshot") -> Phase:
    """A phase that records the run directory's files while the run goes (partial files)."""

    def step() -> None:
        seen.update(files_in(out))
        time.sleep(0.02)

    return Phase(name, step=step, iterations=1, warmup=0, trials=2)


QUICK = RunSettings(trials=2, min_window_s=0.03, warmup_s=0.0)


def check_run(
    out: Path, seen: set[str] = frozenset(), documented_as: dict[str, str] | None = None
) -> set[str]:
    """Assert that every file in ``out`` (and in ``seen``) and every top-level key of its run.json
    is documented; ``documented_as`` maps a file to the pattern the docs use for it."""
    files = files_in(out) | set(seen)
    missing = undocumented({(documented_as or {}).get(f, f) for f in files})
    assert not missing, f"files a run writes, missing from docs/result-format.md: {missing}"
    text = (DOCS / "result-format.md").read_text()
    keys = [k for k in json.loads((out / "run.json").read_text()) if not mentioned(text, k)]
    assert not keys, f"run.json keys missing from docs/result-format.md: {keys}"
    return files


def test_a_timing_only_run_with_every_reporter_writes_documented_files(tmp_path):
    out, seen = tmp_path / "run", set()
    ef.run(
        ListWorkload([snapshot_phase(out, seen)]),
        power="none",
        reporters=["console", "csv", "json", "plot"],
        out=out,
        settings=QUICK,
    )
    files = check_run(out, seen)
    assert {"run.json", "windows.csv", "samples.parquet", "samples.partial.csv"} <= files
    assert {"summary.csv", "summary.json", "power-trace.png"} <= files
    # timing only: no channel and no flags, written as empty cells; plain read_csv makes them NaN,
    # and the recipe in the docs reads them back as empty strings with NaN energy
    assert pd.read_csv(out / "windows.csv")["channel"].isna().all()
    recipe = (
        'pd.read_csv(path, dtype={"channel": str, "estimator": str, "flags": str})'
        '.fillna({"channel": "", "estimator": "", "flags": ""})'
    )
    assert f"`{recipe}`" in (DOCS / "result-format.md").read_text()
    frame = eval(recipe, {"pd": pd, "path": out / "windows.csv"})
    assert set(frame["channel"]) == {""} and set(frame["flags"]) == {""} and set(frame["estimator"]) == {""}
    assert frame["energy_j"].isna().all() and frame["duration_s"].dtype == float


@pytest.mark.slow
def test_runs_with_power_sources_write_documented_files(tmp_path, power_csv, fake_nvml, fake_smi):
    fake_nvml()
    csv = power_csv(100.0, period_s=0.01, duration_s=1.0)
    written = set()
    for name, power in (
        ("replay", [f"replay:file={csv},loop=true"]),
        ("nvml", ["nvml:mode=process"]),
        ("nvidia-smi", ["nvidia-smi"]),
    ):
        out, seen = tmp_path / name, set()
        ef.run(ListWorkload([snapshot_phase(out, seen)]), power=power, reporters=[], out=out, settings=QUICK)
        written |= check_run(out, seen)
    assert {"raw/nvml/nvml-sampler.log", "raw/nvidia-smi/nvidia-smi.csv"} <= written


class TinyModel(ModelWorkload):
    """Two linear layers: a per-layer run in a second on the CPU."""

    def build(self, device, dtype):
        import torch

        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
        model = model.to(device=device, dtype=dtype).eval()
        return model, (torch.randn(2, 16, device=device, dtype=dtype),), {}


def test_derived_tables_of_pipelines_and_per_layer_runs_are_documented(tmp_path):
    pipe = Pipeline("p", [("mm", MatmulKernel(M=16, K=16, N=16, dtype="fp32", unroll=2))])
    ef.run(pipe, power="none", reporters=[], out=tmp_path / "pipeline", settings=QUICK)
    assert {"stages.csv", "summary.csv"} <= check_run(tmp_path / "pipeline")
    model = PerLayer(model=TinyModel(name="tiny", device="cpu"), validate=True, unroll=2)
    ef.run(model, power="none", reporters=[], out=tmp_path / "layers", settings=QUICK)
    assert {"layers.csv", "summary.csv"} <= check_run(tmp_path / "layers")
    text = (DOCS / "result-format.md").read_text()
    for table in ("stages", "summary", "layers"):  # each table says which workloads write it
        assert re.search(rf"`{table}\.csv` \|[^|]*\|[^|]*`", text), table


@pytest.mark.slow
def test_a_replay_run_writes_documented_files(tmp_path):
    from energyframe.replay.capture import capture

    capture("bloom:hidden=32,layers=1,heads=2,vocab=64", tmp_path / "trace", steps=1, warmup=1)
    out = tmp_path / "run"
    ef.run(
        f"replay:trace={tmp_path / 'trace'},unroll=2,limit=3", power="none", reporters=[], out=out, settings=QUICK
    )
    files = check_run(out)
    assert {
        "comparison.csv",
        "tiers.csv",
        "replayed_ops.csv",
        "comparison_report.json",
        "prediction.png",
    } <= files


@pytest.mark.gpu
def test_gpu_only_derived_tables_are_documented(tmp_path):
    out = tmp_path / "cold"
    ef.run("matmul:M=1024,K=1024,N=1024,cold=true", power=["nvml"], reporters=[], out=out, settings=QUICK)
    assert "cold.csv" in check_run(out)


@pytest.mark.gpu
def test_a_sweep_directory_is_documented(tmp_path):
    pytest.importorskip("cupy")
    source = Path(__file__).resolve().parents[1] / "examples" / "matmul_kernels.cu"
    shapes = {"a": ("N", "K"), "b": ("K", "M"), "res": ("N", "M")}
    kernels = [
        ef.load_kernel(source, k, block=(16, 16, 1), shapes=shapes) for k in ("matmul_naive", "matmul_tiled")
    ]
    ef.sweep(
        kernels, N=[256, 512], M=[256], K=[256], power=["nvml"], out=tmp_path, settings=QUICK, reporters=[]
    )
    files = check_run(tmp_path, documented_as={"time_vs_N.png": "time_vs_<param>.png"})
    assert {"sweep.csv", "benchmark_results.json", "time_vs_N.png"} <= files


def plugin_examples() -> dict[str, str]:
    """The code blocks of docs/writing-plugins.md that start with ``# plugin example: KIND``."""
    text = (DOCS / "writing-plugins.md").read_text()
    blocks = re.findall(r"```python\n(# plugin example: ([a-z ]+)\n.*?)```", text, re.S)
    return {kind: code for code, kind in blocks}


def defined(code: str, base: type) -> type:
    """The one plugin class a documentation example defines."""
    namespace: dict = {"__name__": "docs_example"}
    exec(compile(code, "writing-plugins.md", "exec"), namespace)
    found = [v for v in namespace.values() if isinstance(v, type) and issubclass(v, base) and v.__module__ == "docs_example"]
    assert len(found) == 1, found
    return found[0]


def test_the_three_plugin_examples_are_short():
    examples = plugin_examples()
    assert set(examples) == {"power source", "workload", "reporter"}
    for kind, code in examples.items():
        lines = [line for line in code.splitlines() if line.strip()]
        assert len(lines) <= 40, f"the {kind} example has {len(lines)} lines"


@pytest.fixture
def pdu():
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class FakePDU(BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"watts": 231.5}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), FakePDU)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/outlet/3"
    server.shutdown()


def test_the_power_source_example_keeps_the_contract(pdu):
    from energyframe.testing import check_power_source

    cls = defined(plugin_examples()["power source"], plugin.PowerSource)
    samples = check_power_source(cls, {"url": pdu, "interval_s": 0.05, "averaging_s": 0.05}, run_s=0.4)
    assert samples["pdu"] and {s.value for s in samples["pdu"]} == {231.5}


def test_the_workload_example_keeps_the_contract():
    from energyframe.testing import check_workload

    cls = defined(plugin_examples()["workload"], plugin.Workload)
    result = check_workload(cls, {"sizes": "16,32"})
    assert set(result.windows["phase"]) == {"matmul-16", "matmul-32"}
    assert result.summary("matmul-32").work == {"flop": 2.0 * 32**3}


def test_the_reporter_example_keeps_the_contract(tmp_path, capsys):
    from energyframe.testing import check_reporter, sample_result

    cls = defined(plugin_examples()["reporter"], plugin.Reporter)
    check_reporter(cls)
    cls(path=str(tmp_path / "s.tsv")).report(sample_result(), None)
    lines = (tmp_path / "s.tsv").read_text().splitlines()
    assert lines[0].startswith("phase\tchannel\ttrials") and len(lines) == 3  # two phases, one channel
    assert lines[1].split("\t")[2] == "2 of 2"


def test_the_ef_run_docstring_example_runs():
    from energyframe.lifecycle import orchestrator

    example = orchestrator.run.__doc__.split("Example::", 1)[1].strip().splitlines()[0].strip()
    namespace = {"ef": __import__("energyframe")}
    exec(example, namespace)
    assert namespace["result"].complete


def test_the_architecture_page_names_every_module_and_only_real_ones():
    text = (DOCS / "architecture.md").read_text()
    package = Path(ef.__file__).parent
    layers = text[text.index("## Layers") : text.index("## One run's data flow")]
    named = set(re.findall(r"`([\w/.-]+(?:\.py|/))`", layers))
    files = {p.relative_to(package).as_posix() for p in package.rglob("*.py")}
    folders = {p.relative_to(package).as_posix() + "/" for p in package.rglob("*") if p.is_dir()}
    known = files | folders | {Path(f).name for f in files} | {Path(d).name + "/" for d in folders}
    unknown = sorted(n for n in named if n not in known and not (package.parent / n).exists())
    assert not unknown, f"docs/architecture.md names modules that do not exist: {unknown}"
    subpackages = {init.parent.name + "/" for init in package.glob("*/__init__.py")}
    top = {p.name for p in package.glob("*.py")} | subpackages
    missing = sorted(top - named)
    assert not missing, f"modules without a row in docs/architecture.md's layers: {missing}"
    links = re.findall(r"\]\(([^)#]+)\)", text)
    assert links
    broken = [link for link in links if not (DOCS / link).is_file()]
    assert not broken, f"docs/architecture.md links to missing pages: {broken}"


# -- the README's Python examples --------------------------------------------------------------
README = DOCS.parent / "README.md"


def readme_python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


class QuickEnergyframe:
    """``energyframe`` as the README's code sees it, with ``ef.run`` given short windows (the
    defaults take 8 s a phase): every other name is the real one."""

    def __getattr__(self, name):
        return getattr(ef, name)

    @staticmethod
    def run(*args, **kwargs):
        kwargs.setdefault("settings", QUICK)
        kwargs.setdefault("reporters", [])
        return ef.run(*args, **kwargs)


@pytest.mark.slow
def test_the_readme_python_examples_run_and_print(tmp_path, monkeypatch, fake_nvml, capsys):
    """Every ```python block of README.md, as written (fake NVML at the lowest layer, a tiny
    model for ``net``): the on_window_energy callback prints every window."""
    import torch

    fake_nvml()
    monkeypatch.chdir(tmp_path)
    blocks = readme_python_blocks()
    assert len(blocks) == 2 and "import energyframe as ef" in blocks[0]
    namespace = {
        "step": lambda: sum(range(1000)),
        "serve": lambda request: time.sleep(0.05),
        "request": object(),
        "net": torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)),
        "x": torch.randn(2, 8),
        "loader": range(3),
    }
    for block in blocks:
        code = block.replace("import energyframe as ef\n", "ef = QUICK_EF\n")
        exec(compile(code, "README.md", "exec"), {**namespace, "QUICK_EF": QuickEnergyframe()}, namespace)
    out = capsys.readouterr().out
    heard = re.findall(r"^(train-step|request) (\d+\.\d{3}) J ± [\d.e+]+ %$", out, re.M)
    assert sorted(phase for phase, _ in heard) == ["request", "train-step"], out
    assert all(float(energy_j) > 0 for _, energy_j in heard)
    assert re.search(r"^\d+\.\d{3} J$", out, re.M), out  # w.energy_j
    assert (tmp_path / "runs" / "my-run" / "run.json").is_file() and namespace["result"].complete
    measured = [p for p in (tmp_path / "runs").iterdir() if p.name.endswith("-measured")]
    assert len(measured) == 1 and ef.load_run(measured[0]).summary("train_step").trials == 3
    assert {"my-run", "x", measured[0].name} <= {Path(p).name for p in namespace["table"]["run"]}
