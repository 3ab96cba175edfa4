"""The package's shape: imports only go downward (core <- data <- train, analysis), analysis never
imports train, no module-level import cycle, and everything the analysis image runs imports without torch."""

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "workflow" / "mcgrpo"
# What each layer may import at module level (besides itself and the package root's __version__).
ALLOWED = {"core": {"core"}, "data": {"core", "data"}, "train": {"core", "data", "train"},
           "analysis": {"core", "analysis"}}


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _python(code: str) -> str:
    """What `code` prints, run in a fresh interpreter (only its own imports loaded); it must exit 0."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def _imports(path: Path, top_level_only: bool) -> set[str]:
    """mcgrpo modules `path` imports (at module level only, or anywhere)."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mcgrpo"):
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                found.add(candidate if _exists(candidate) else node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("mcgrpo")}
    return found


def _exists(module: str) -> bool:
    rel = PACKAGE.parent.joinpath(*module.split("."))
    return rel.with_suffix(".py").exists() or (rel / "__init__.py").exists()


MODULES = {_module(p): p for p in PACKAGE.rglob("*.py")}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ALLOWED else None


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _layer(m)))
def test_imports_only_go_downward(module):
    layer = _layer(module)
    wrong = sorted(i for i in _imports(MODULES[module], top_level_only=False)
                   if _layer(i) and _layer(i) not in ALLOWED[layer])
    assert not wrong, f"{module} ({layer}) imports {wrong}; a {layer} module may use {sorted(ALLOWED[layer])}"


def test_no_module_level_import_cycle():
    graph = {m: {i for i in _imports(p, top_level_only=True) if i in MODULES and i != m} for m, p in MODULES.items()}
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*path[path.index(n):], n]))
            if n not in state:
                visit(n, [*path, n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


def test_analysis_and_the_cli_import_with_torch_unimportable():
    """The analysis image has none of the `train` and `vllm` extras (torch, transformers, tokenizers,
    scikit-learn, vllm): every analysis, core and data module, the config validation and the CLI import there."""
    light = sorted(m for m in MODULES if _layer(m) in ("core", "analysis", "data"))
    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path, target=None):\n"
            "        if name.split('.')[0] in ('torch', 'transformers', 'tokenizers', 'sklearn', 'vllm'):\n"
            "            raise ImportError(f'{name} is not installed in the analysis image')\n"
            "sys.meta_path.insert(0, Block())\n"
            f"for m in {[*light, 'mcgrpo.studies', 'mcgrpo.cli']!r}: __import__(m)\n"
            "print('ok')")
    assert _python(code) == "ok"


NOT_IMPORTED = {"mcgrpo.__main__", "mcgrpo.train.engines.vllm"}  # runs the CLI; needs the vllm package


def test_no_module_imports_the_tracking_libraries_until_a_run_asks_for_one():
    """TensorBoard and W&B are a host extra (`tracking`), imported only by a run whose study asks for one;
    where one is missing, that run fails with a user error saying what to install."""
    code = textwrap.dedent(f"""
        import sys
        for m in {sorted(set(MODULES) - NOT_IMPORTED)!r}:
            __import__(m)
        loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorboard', 'wandb')
                        or m.startswith('torch.utils.tensorboard'))
        assert not loaded, loaded
        class Block:  # from here on, neither library is installed
            def find_spec(self, name, path, target=None):
                if name.split('.')[0] in ('tensorboard', 'wandb') or name == 'torch.utils.tensorboard':
                    raise ImportError(f'{{name}} is not installed')
        sys.meta_path.insert(0, Block())
        from mcgrpo.train import tracking
        from mcgrpo.core.errors import ConfigError
        assert tracking.open_tracker('none', '.', {{}}) is None
        for backend in ('tensorboard', 'wandb'):
            try:
                tracking.open_tracker(backend, '.', {{}})
                raise SystemExit(backend + ' opened without its library')
            except ConfigError as e:
                assert f"config key tracking: '{{backend}}' needs" in str(e) and 'pip install' in str(e), e
        print('ok')
    """)
    assert _python(code) == "ok"


def test_a_training_job_imports_no_scikit_learn_or_scipy_until_a_critic_or_predictor_fits():
    """Every training job builds the credit rules and the selector; scikit-learn and scipy (2-3 s of a job's
    start) are imported only by the fits that need them."""
    code = ("import sys\n"
            "import mcgrpo.cli, mcgrpo.train.trainer\n"
            "from mcgrpo.core import plugins\n"
            "[plugins.load(kind, name, 'x') for kind in plugins.BUILTIN for name in plugins.BUILTIN[kind]]\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'sklearn', 'scipy'}))")
    assert _python(code) == "[]"
