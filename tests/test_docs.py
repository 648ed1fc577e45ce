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
