"""Discovery through entry points, with plugins registered the way installed packages are."""

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from energyframe.cli import main
from energyframe.errors import PluginLoadError, PluginNotFoundError
from energyframe.kit import registry
from energyframe.power.replay import ReplayPowerSource

GOOD = """
from energyframe.plugin import Option, Reporter

class HelloReporter(Reporter):
    DESCRIPTION = "says hello"
    OPTIONS = (Option("greeting", "str", "hello", "what to say"),)

    def report(self, result, run_dir):
        print(self.options["greeting"], result.status)
"""

BROKEN = """
import a_module_that_is_not_installed
"""

NOT_A_PLUGIN = """
class Thing:
    pass
"""


def test_builtins_are_registered_by_the_projects_own_metadata():
    assert {"replay"} <= set(registry.names(registry.POWER))
    assert {"command", "sleep", "cpu-matmul"} <= set(registry.names(registry.WORKLOADS))
    assert {"console", "csv", "json"} <= set(registry.names(registry.REPORTERS))
    assert registry.load(registry.POWER, "replay") is ReplayPowerSource


def test_an_installed_plugin_is_found_loaded_and_listed(install_plugin):
    install_plugin("energyframe.reporters", "hello", "ef_hello", GOOD, "HelloReporter")
    cls = registry.load(registry.REPORTERS, "hello")
    assert cls.__name__ == "HelloReporter"
    reporter = registry.create(registry.REPORTERS, "hello:greeting=hi")
    assert reporter.options == {"greeting": "hi"}
    out = CliRunner().invoke(main, ["list", "reporters"]).output
    assert "hello  [fake-plugin 1.0]  says hello" in out
    assert "greeting (str, default hello): what to say" in out


def test_a_plugin_that_fails_to_import_is_listed_with_its_reason(install_plugin):
    install_plugin("energyframe.reporters", "broken", "ef_broken", BROKEN, "Broken")
    result = CliRunner().invoke(main, ["list"])
    assert result.exit_code == 0
    assert (
        "broken  [fake-plugin 1.0]  FAILED TO LOAD: ModuleNotFoundError: No module named 'a_module_that_is_not_installed'"
        in result.output
    )
    assert "console" in result.output and "replay" in result.output  # the others still work
    with pytest.raises(PluginLoadError) as e:
        registry.load(registry.REPORTERS, "broken")
    assert str(e.value) == (
        "reporter 'broken' (ef_broken:Broken) failed to load: "
        "ModuleNotFoundError: No module named 'a_module_that_is_not_installed'"
    )
    # and a run that does not use it is unaffected
    assert registry.load(registry.REPORTERS, "console").__name__ == "ConsoleReporter"


def test_a_registered_object_that_is_not_a_plugin_is_refused(install_plugin):
    install_plugin("energyframe.power", "thing", "ef_thing", NOT_A_PLUGIN, "Thing")
    with pytest.raises(
        PluginLoadError, match=r"power source 'thing' \(ef_thing:Thing\) is not a PowerSource subclass"
    ):
        registry.load(registry.POWER, "thing")
    (entry,) = [e for e in registry.entries(registry.POWER) if e.name == "thing"]
    assert entry.error == "not a PowerSource subclass"


def test_unknown_name_lists_what_is_available():
    with pytest.raises(PluginNotFoundError) as e:
        registry.load(registry.WORKLOADS, "nope")
    assert str(e.value) == "unknown workload 'nope'. Available: " + ", ".join(
        registry.names(registry.WORKLOADS)
    )
    assert {"command", "cpu-matmul", "resnet50", "matmul"} <= set(registry.names(registry.WORKLOADS))


@pytest.mark.parametrize(
    "kind,typed,guess",
    [
        (registry.WORKLOADS, "cpu-matmull", "Did you mean 'cpu-matmul' or 'matmul'?"),
        (registry.WORKLOADS, "resnet5", "Did you mean 'resnet50' or 'resnet18'?"),
        (registry.POWER, "nvidia_smi", "Did you mean 'nvidia-smi'?"),
        (registry.REPORTERS, "markdwon", "Did you mean 'markdown'?"),
    ],
)
def test_a_typo_gets_the_closest_names_and_still_the_whole_list(kind, typed, guess):
    with pytest.raises(PluginNotFoundError) as e:
        registry.load(kind, typed)
    listing = ", ".join(registry.names(kind))
    assert str(e.value) == f"unknown {registry.LABELS[kind]} {typed!r}. {guess} Available: {listing}"


@pytest.mark.slow
def test_a_plugin_failing_to_import_does_not_break_a_run_in_another_process(install_plugin, tmp_path):
    site = install_plugin("energyframe.workloads", "broken", "ef_broken2", BROKEN, "Broken")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    listing = subprocess.run(
        [sys.executable, "-m", "energyframe", "list", "workloads"], capture_output=True, text=True, env=env
    )
    assert "broken  [fake-plugin 1.0]  FAILED TO LOAD" in listing.stdout
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "energyframe",
            "run",
            "--power",
            "none",
            "--workload",
            "sleep:seconds=0.01",
            "--trials",
            "1",
            "--out",
            str(tmp_path / "r"),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    using = subprocess.run(
        [sys.executable, "-m", "energyframe", "run", "--workload", "broken"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert using.returncode == 1
    assert "Error: workload 'broken' (ef_broken2:Broken) failed to load: ModuleNotFoundError" in using.stderr


def test_a_plugins_distribution_is_found_without_scanning_every_package(install_plugin, monkeypatch):
    """run.json names the distribution behind each plugin. A distribution named after the
    plugin's package is read directly; only others fall back to the scan of every installed
    package (seconds on a machine with many), which is then done once."""
    from energyframe.results import provenance
    from energyframe.workloads.basic import SleepWorkload

    scans = []
    real = provenance.md.packages_distributions
    monkeypatch.setattr(provenance.md, "packages_distributions", lambda: scans.append(1) or real())
    registry.refresh()
    version = provenance.distribution_version("energyframe")
    assert provenance.plugin_distribution(SleepWorkload) == ("energyframe", version)
    assert scans == []

    root = install_plugin(
        "energyframe.reporters", "hello", "ef_hello", GOOD, "HelloReporter", dist="fake-plugin"
    )
    (root / "fake_plugin-1.0.dist-info" / "top_level.txt").write_text("ef_hello\n")
    cls = registry.load(registry.REPORTERS, "hello")
    assert provenance.plugin_distribution(cls) == ("fake-plugin", "1.0")  # ef_hello is not its name
    assert provenance.plugin_distribution(cls) == ("fake-plugin", "1.0")
    assert scans == [1]


OTHER_MARKDOWN = """
from energyframe.plugin import Reporter

class TheirMarkdown(Reporter):
    DESCRIPTION = "their markdown"

    def report(self, result, run_dir):
        pass
"""


def test_a_name_two_packages_register_means_the_third_partys_and_either_can_be_named(install_plugin, caplog):
    """We added a built-in 'markdown' reporter after a third-party package had registered one:
    runs that name it keep meaning theirs (with a warning), and name@package picks either."""
    from energyframe.reporters.markdown import MarkdownReporter

    install_plugin(
        "energyframe.reporters",
        "markdown",
        "their_md",
        OTHER_MARKDOWN,
        "TheirMarkdown",
        dist="energyframe-extras",
    )
    with caplog.at_level("WARNING", logger="energyframe"):
        assert registry.load(registry.REPORTERS, "markdown").__name__ == "TheirMarkdown"
    assert any(
        "reporter 'markdown' is registered by several packages" in r.message
        and "using markdown@energyframe-extras (say markdown@energyframe for another)" in r.message
        for r in caplog.records
    )
    assert registry.load(registry.REPORTERS, "markdown@energyframe") is MarkdownReporter
    assert registry.load(registry.REPORTERS, "markdown@energyframe_extras").__name__ == "TheirMarkdown"
    reporter = registry.create(registry.REPORTERS, "markdown@energyframe")
    assert reporter.name == "markdown" and isinstance(reporter, MarkdownReporter)
    with pytest.raises(PluginNotFoundError) as e:
        registry.load(registry.REPORTERS, "markdown@nobody")
    assert str(e.value) == (
        "no package 'nobody' registers reporter 'markdown'; registered: markdown@energyframe, "
        "markdown@energyframe-extras"
    )
    out = CliRunner().invoke(main, ["list", "reporters"]).output
    assert "markdown@energyframe-extras  [energyframe-extras 1.0]  their markdown" in out
    assert "markdown@energyframe  [energyframe " in out


def test_a_name_two_third_parties_register_asks_which(install_plugin):
    from energyframe.errors import UsageError

    install_plugin(
        "energyframe.reporters", "twice", "first_twice", OTHER_MARKDOWN, "TheirMarkdown", dist="pkg-a"
    )
    install_plugin(
        "energyframe.reporters", "twice", "second_twice", OTHER_MARKDOWN, "TheirMarkdown", dist="pkg-b"
    )
    with pytest.raises(UsageError) as e:
        registry.load(registry.REPORTERS, "twice")
    assert str(e.value) == "several packages register reporter 'twice'; choose one: twice@pkg-a, twice@pkg-b"
    assert registry.load(registry.REPORTERS, "twice@pkg-b").__module__ == "second_twice"
    result = CliRunner().invoke(
        main, ["run", "--power", "none", "--workload", "sleep:seconds=0", "--reporter", "twice"]
    )
    assert result.exit_code == 2
    assert (
        "Error: several packages register reporter 'twice'; choose one: twice@pkg-a, twice@pkg-b"
        in result.output
    )
