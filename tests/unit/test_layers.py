"""The package's modules import one another without a cycle, counting the imports inside functions
(deferred, not gone) but not those for type hints alone: each module can be read knowing only those
below it. And the modules that import on CPU-only machines keep GPU libraries out of their top
level."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "zarr_dask_gpu"


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    for path in PACKAGE.glob("*.so"):  # the C extension: a leaf
        found[f"zarr_dask_gpu.{path.name.split('.')[0]}"] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    if path.suffix == ".so":
        return set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):  # type hints only: not an edge
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            node.body = []
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            for a in node.names:
                target = f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module
                if target in modules:
                    out.add(target)
    out.discard(name)
    return out


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        path.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                return [*path[path.index(w) :], w]
            if w not in state and (found := visit(w)):
                return found
        state[v] = 2
        path.pop()
        return None

    for v in sorted(graph):
        if v not in state and (found := visit(v)):
            return found
    return None


def test_the_modules_import_one_another_without_a_cycle():
    modules = _modules()
    # the package's __init__ is its front door: it imports the top layer, and no module needs it
    graph = {
        name: {m for m in _imports(name, path, modules) if m != "zarr_dask_gpu"}
        for name, path in modules.items()
    }
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_cpu_modules_import_no_gpu_library_at_their_top():
    gpu_libraries = {"cupy", "kvikio", "nvidia", "cupyx", "rmm", "dask_cuda"}
    for name, path in _modules().items():
        if name.startswith("zarr_dask_gpu.gpu") or path.suffix == ".so":
            continue
        for node in ast.parse(path.read_text()).body:
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            assert not {n.split(".")[0] for n in names} & gpu_libraries, (name, names)


def test_the_package_calls_no_test_helper():
    """``testing/`` serves the tests, the demo and the benchmark: its faults on demand reach no module
    of the package, and its sample stores only the command line and the benchmark."""
    modules = _modules()
    users = {
        name: {m for m in _imports(name, path, modules) if m.startswith("zarr_dask_gpu.testing.")}
        for name, path in modules.items()
        if not name.startswith("zarr_dask_gpu.testing")
    }
    allowed = {"zarr_dask_gpu.testing.sample_stores"}
    for name, used in users.items():
        assert not used - allowed, (name, used)
        assert not used or name == "zarr_dask_gpu.cli" or name.startswith("zarr_dask_gpu.bench"), name
