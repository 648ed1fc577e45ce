"""energyframe.interfaces, the plugin contract's former home: importing it warns and names
energyframe.plugin (at the importing line), and its names are still the plugin API's."""

import sys

import pytest

import energyframe.plugin as plugin

NAMES = (
    "Plugin",
    "PowerSource",
    "Workload",
    "Reporter",
    "Channel",
    "ClockBase",
    "DerivedTable",
    "Detection",
    "Phase",
    "Quantity",
    "Sample",
    "Scope",
    "SourceContext",
    "Timing",
    "WindowAnnotation",
    "no_sync",
)


@pytest.fixture
def not_imported(monkeypatch):
    """Import the shim afresh in this test (a module warns only when it is first imported)."""
    monkeypatch.delitem(sys.modules, "energyframe.interfaces", raising=False)


def test_importing_the_shim_warns_at_the_importer_and_names_the_replacement(not_imported):
    with pytest.warns(DeprecationWarning) as caught:
        import energyframe.interfaces  # noqa: F401
    assert [str(w.message) for w in caught] == [
        "energyframe.interfaces is deprecated: import the same names from energyframe.plugin"
    ]
    assert caught[0].filename == __file__  # the importer, not the shim or importlib


def test_the_shim_still_gives_the_plugin_api(not_imported):
    with pytest.warns(DeprecationWarning, match="energyframe.plugin"):
        from energyframe.interfaces import PowerSource, Workload

    assert PowerSource is plugin.PowerSource and Workload is plugin.Workload
    interfaces = sys.modules["energyframe.interfaces"]
    for name in NAMES:
        assert getattr(interfaces, name) is getattr(plugin, name), name
