"""What plugin authors may build on: ``energyframe list --json`` (every plugin, its options with
types, defaults and help, load errors; a versioned document, unlike the human text),
``FakeContext`` as the ``SourceContext`` the docs call it, ``KnownProfileSource`` as documented,
and the scaffold saying which setuptools it needs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from energyframe.cli import main
from energyframe.cli.listing import LIST_FORMAT
from energyframe.model import Channel, Quantity, Scope, SourceContext
from energyframe.testing import FakeContext, KnownProfileSource, check_power_source

GOOD = """
from energyframe.plugin import Option, Reporter

class HelloReporter(Reporter):
    DESCRIPTION = "says hello"
    OPTIONS = (Option("greeting", "str", "hello", "what to say"),
               Option("times", "int", 1, "how often. Units: times", minimum=1),
               Option("tone", "choice", "warm", "how", choices=("warm", "cold")))

    def report(self, result, run_dir):
        pass
"""
BROKEN = "import a_module_that_is_not_installed\n"


def listed(*argv: str) -> dict:
    r = CliRunner().invoke(main, ["list", *argv, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_list_json_gives_every_plugin_its_options_and_load_errors(install_plugin):
    install_plugin("energyframe.reporters", "hello", "ef_hello_json", GOOD, "HelloReporter")
    install_plugin("energyframe.reporters", "broken", "ef_broken_json", BROKEN, "Broken")
    document = listed()
    assert document["format_version"] == LIST_FORMAT == 1
    plugins = {(p["kind"], p["name"]): p for p in document["plugins"]}
    hello = plugins[("reporters", "hello")]
    assert hello["loaded"] and hello["error"] is None and hello["description"] == "says hello"
    assert hello["distribution"] == "fake-plugin" and hello["version"] == "1.0"
    assert hello["group"] == "energyframe.reporters" and hello["target"] == "ef_hello_json:HelloReporter"
    assert hello["options"] == [
        {"name": "greeting", "type": "str", "default": "hello", "default_text": "default hello", "required": False,
         "choices": [], "minimum": None, "min_items": 0, "help": "what to say"},
        {"name": "times", "type": "int", "default": 1, "default_text": "default 1", "required": False,
         "choices": [], "minimum": 1, "min_items": 0, "help": "how often. Units: times"},
        {"name": "tone", "type": "choice", "default": "warm", "default_text": "default warm", "required": False,
         "choices": ["warm", "cold"], "minimum": None, "min_items": 0, "help": "how"},
    ]
    broken = plugins[("reporters", "broken")]
    assert not broken["loaded"] and broken["options"] == [] and broken["description"] is None
    assert broken["error"] == "ModuleNotFoundError: No module named 'a_module_that_is_not_installed'"
    replay = plugins[("power", "replay")]
    assert "auto_priority" in replay and replay["options"]  # power sources say whether they are auto-detected
    assert {c["name"] for c in document["commands"]} >= {"analyze", "monitor", "runs"}


def test_list_json_of_one_kind_holds_that_kind_only():
    document = listed("workloads")
    assert {p["kind"] for p in document["plugins"]} == {"workloads"} and "commands" not in document
    assert listed("commands")["plugins"] == []


def test_fake_context_is_a_source_context_that_keeps_warnings(tmp_path: Path):
    context = FakeContext(tmp_path / "raw", devices=["cuda:0"], rank=1)
    assert isinstance(context, SourceContext)  # documented as one: start(context) takes it as it is
    context.warn("first")
    assert context.warnings == ["first"] and context.raw_dir == tmp_path / "raw"
    assert context.devices == ["cuda:0"] and context.rank == 1 and context.context() is context
    source = KnownProfileSource(profile=lambda t: 100.0)
    channels = source.start(context)
    try:
        assert channels == [Channel("gpu0", Quantity.POWER, Scope.GPU, 0.02, channels[0].clock,
                                    description="a known power profile")]
    finally:
        source.stop()


def test_known_profile_source_keeps_the_contract_with_its_documented_signature():
    samples = check_power_source(KnownProfileSource, {"profile": lambda t: 150.0 + (t % 1.0), "period_s": 0.02},
                                 run_s=0.5)
    channel = f"{KnownProfileSource.__name__.lower()}0"  # the source's name + "0" (check_power_source names it)
    assert list(samples) == [channel]
    assert all(150.0 <= s.value < 151.0 for s in samples[channel])


def test_the_scaffold_says_which_setuptools_it_needs(tmp_path: Path):
    r = CliRunner().invoke(main, ["new-plugin", "probe", "--kind", "power", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    package = tmp_path / "energyframe-probe"
    assert 'requires = ["setuptools>=70.1"]' in (package / "pyproject.toml").read_text()
    readme = (package / "README.md").read_text()
    assert "setuptools 70.1 or newer" in readme
    assert "setuptools>=70.1" in (package / "pyproject.toml").read_text().split("[project]")[0]


@pytest.mark.parametrize("page", ["writing-plugins.md"])
def test_the_docs_say_what_is_stable_and_keep_a_changelog(page):
    docs = Path(__file__).resolve().parents[2] / "docs"
    text = (docs / page).read_text()
    assert "## What is stable" in text and "energyframe list --json" in text
    assert "(changelog.md)" in text and (docs / "changelog.md").exists()
