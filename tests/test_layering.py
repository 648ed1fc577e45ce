"""The layer rule of docs/architecture.md as a contract: every import inside the package (at
module level or inside a function) points to its own layer or to a layer below, except the
arrows listed here with their reason. A new arrow that runs up fails this test."""

from __future__ import annotations

import ast
from pathlib import Path

import energyframe

PACKAGE = Path(energyframe.__file__).parent

#: bottom to top; a name is a module at the package root or a folder
LAYERS = [
    {"errors", "model", "options"},
    {"core"},
    {"results"},
    {"ranks"},
    {"plugin", "kit"},
    {"live"},
    {"lifecycle"},
    {"offline"},
    {"compare"},
    {"report", "testing"},
    # the built-in plugins, registered like a third party's: replay and sweeps build on workloads
    {"power"},
    {"workloads"},
    {"replay", "sweeps", "reporters", "serving"},
    {"cli", "api", "integrations", "__init__", "__main__"},
]

#: (importing module, imported module) prefixes allowed to point up, each with its reason
ALLOWED_UP = {
    ("workloads.perlayer", "replay.graphgap"): "kernel_gaps=true profiles the whole-model graph "
    "with the replay's trace reader",
}


def layer_of(module: str) -> int:
    """The layer of ``energyframe.<module>`` (dotted, without the package name)."""
    head = module.split(".")[0] if module else "__init__"
    for index, names in enumerate(LAYERS):
        if head in names:
            return index
    raise AssertionError(f"energyframe.{module} is in no layer of tests/test_layering.py")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def imported(path: Path) -> set[str]:
    """Every energyframe module ``path`` imports, relative to the package (``core.energy``)."""
    here = module_name(path)
    package = here.split(".") if path.name == "__init__.py" else here.split(".")[:-1]
    if here == "__init__":
        package = []
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            elif (node.module or "").startswith("energyframe"):
                target = node.module.removeprefix("energyframe").lstrip(".")
            else:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}" if target else alias.name
                is_module = (PACKAGE / sub.replace(".", "/")).with_suffix(".py").exists() or (
                    PACKAGE / sub.replace(".", "/")
                ).is_dir()
                out.add(sub if is_module else target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("energyframe."):
                    out.add(alias.name.removeprefix("energyframe."))
    return {m for m in out if m}


def arrows() -> list[tuple[str, str]]:
    return sorted((module_name(p), target) for p in PACKAGE.rglob("*.py") for target in imported(p))


def test_every_arrow_points_down_or_is_listed():
    up = []
    used = set()
    for source, target in arrows():
        if layer_of(target) <= layer_of(source):
            continue
        allowed = [key for key in ALLOWED_UP if source.startswith(key[0]) and target.startswith(key[1])]
        used.update(allowed)
        if not allowed:
            up.append(f"energyframe.{source} -> energyframe.{target}")
    assert not up, "imports that point up a layer (docs/architecture.md):\n" + "\n".join(up)
    assert used == set(ALLOWED_UP), f"listed exceptions no import needs any more: {set(ALLOWED_UP) - used}"


def test_every_folder_and_root_module_has_a_layer():
    names = {p.stem for p in PACKAGE.glob("*.py")} | {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    for name in names:
        layer_of("" if name == "__init__" else name)


def test_the_package_root_holds_the_vocabulary_and_the_plugin_authors_paths_only():
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= 10, root


def test_the_contract_sees_imports_inside_functions():
    # the walk reads every import statement, not only those at module level
    assert ("lifecycle.measurement", "ranks.coordinator") in arrows()
    assert any(s == "report.markdown" and t == "compare.comparability" for s, t in arrows())
