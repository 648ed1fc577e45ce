"""The documentation covers the code it describes (datasette's rule: docs tested against code)."""

import dataclasses
import inspect
import re
from pathlib import Path

import pytest

from energyframe import energy, model, plugin
from energyframe.cli import main
from energyframe.results import RunResult
from energyframe.stats import Spread
from energyframe.windows import NOISY, PARTIAL, WINDOW_COLUMNS, PhaseSummary

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
    flags = [v for k, v in vars(energy).items() if k.isupper() and isinstance(v, str)] + [NOISY, PARTIAL]
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


def test_plugin_base_methods_have_docstrings():
    for cls in (plugin.PowerSource, plugin.Workload, plugin.Reporter):
        for name, member in inspect.getmembers(cls, predicate=inspect.isfunction):
            if not name.startswith("_"):
                assert member.__doc__, f"{cls.__name__}.{name} has no docstring"


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
    from energyframe import orchestrator

    example = orchestrator.run.__doc__.split("Example::", 1)[1].strip().splitlines()[0].strip()
    namespace = {"ef": __import__("energyframe")}
    exec(example, namespace)
    assert namespace["result"].complete
