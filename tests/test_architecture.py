"""The package's shape, read statically from every import statement (at module level and inside functions):
imports only go downward (the package root <- core <- data <- train <- integrations (other trainers under the
protocol); core <- analysis; and all of them <- the top: cli, studies, programme, screen, dryrun, api, tiny_model), train and analysis never
import each other, no module imports itself back through any chain, and everything the analysis image runs
imports without torch."""

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "workflow" / "mcgrpo"
# What each layer may import (besides the package root, which holds only __version__). "top" is every module
# outside the four packages (the CLI and what it drives); nothing below imports it.
ALLOWED = {"root": set(), "core": {"core"}, "data": {"core", "data"}, "train": {"core", "data", "train"},
           "integrations": {"core", "data", "train", "integrations"},
           "analysis": {"core", "analysis"},
           "top": {"core", "data", "train", "integrations", "analysis", "top"}}


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _python(code: str) -> str:
    """What `code` prints, run in a fresh interpreter (only its own imports loaded); it must exit 0."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def _exists(module: str) -> bool:
    rel = PACKAGE.parent.joinpath(*module.split("."))
    return rel.with_suffix(".py").exists() or (rel / "__init__.py").exists()


def _imports(path: Path, top_level_only: bool = False) -> set[str]:
    """The mcgrpo modules `path` imports (at module level only, or anywhere): `from P import N` names the
    submodule P.N where there is one, else P; a relative import is resolved against `path`'s package."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    package = _module(path).split(".")[:None if path.name == "__init__.py" else -1]
    found = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            base = ".".join([*package[:len(package) - node.level + 1], *([node.module] if node.module else [])]) \
                if node.level else node.module
            if base and base.split(".")[0] == "mcgrpo":
                found |= {f"{base}.{a.name}" if _exists(f"{base}.{a.name}") else base for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "mcgrpo"}
    return found - {_module(path)}


MODULES = {_module(p): p for p in PACKAGE.rglob("*.py")}
GRAPH = {m: _imports(p) for m, p in MODULES.items()}


def _layer(module: str) -> str:
    parts = module.split(".")
    if module == "mcgrpo":
        return "root"
    # integrations/ holds other trainers run under the protocol (TRL's): above train, which it drives, and below
    # the CLI, which chooses the trainer of a run (train/job.py takes it as an argument)
    return parts[1] if parts[1] in ("core", "data", "train", "integrations", "analysis") else "top"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_only_go_downward(module):
    layer = _layer(module)
    wrong = sorted(i for i in GRAPH[module] if _layer(i) not in ALLOWED[layer] | {"root"})
    assert not wrong, f"{module} ({layer}) imports {wrong}; a {layer} module may use {sorted(ALLOWED[layer])}"


def test_the_train_layer_never_imports_an_integration():
    """The train job is given TRL's runner by the CLI: train/ reaches no module of integrations/ (the one upward
    import there was, job.py's of the TRL integration)."""
    upward = sorted(f"{m} -> {i}" for m, imported in GRAPH.items() if _layer(m) == "train"
                    for i in imported if _layer(i) == "integrations")
    assert upward == [] and _layer("mcgrpo.integrations.trl") == "integrations"
    assert "mcgrpo.integrations.trl" in GRAPH["mcgrpo.cli.integrations"]  # the CLI chooses TRL's runner



def test_the_cli_mirrors_the_package_folders():
    """Each verb sits in the CLI module named for the folder it drives (cli/train.py: mcgrpo/train), beside
    common.py (what the verbs share) and __init__.py (the parser and main)."""
    cli = {m.rpartition(".")[2] for m in MODULES if m.startswith("mcgrpo.cli.")}
    assert cli - {"common"} == {"core", "data", "train", "integrations", "analysis"}

def test_every_import_names_a_module_of_the_package():
    """A misspelt or moved module would otherwise drop out of the graph unseen."""
    unknown = sorted(f"{m} -> {i}" for m, imported in GRAPH.items() for i in imported if i not in MODULES)
    assert not unknown, unknown


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles (a -> b -> ... -> a) a depth-first search meets, one per edge back into its open path: empty
    exactly when the graph has none."""
    found, state = [], {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = "open"
        for n in sorted(graph.get(m, ())):
            if state.get(n) == "open":
                found.append([*path[path.index(n):], n])
            elif n not in state:
                visit(n, [*path, n])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    return found


def test_the_cycle_finder_finds_a_circle_through_a_function_level_import():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []
    lazy = PACKAGE / "cli" / "train.py"  # `from mcgrpo.train.models import shipped` inside warm_start
    assert "mcgrpo.train.models.shipped" in _imports(lazy) - _imports(lazy, top_level_only=True)


def test_no_import_circle_anywhere():
    """No module imports, through any chain of imports at module level or inside functions, one that imports
    it back: a circle hidden in a function still ties the two modules into one."""
    found = cycles(GRAPH)
    assert not found, "import circle(s): " + "; ".join(" -> ".join(c) for c in found)


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


def test_a_training_job_imports_no_scikit_learn_or_scipy_unless_it_builds_a_critic_or_predictor():
    """Every training job loads the credit rules and the selector; scikit-learn and scipy (2-3 s of a job's
    start) are imported only by the critics and predictors that fit, when built (outside the stage clock)."""
    code = ("import sys\n"
            "import mcgrpo.cli, mcgrpo.train.trainer\n"
            "from mcgrpo.core import plugins\n"
            "[plugins.load(kind, name, 'x') for kind in plugins.BUILTIN for name in plugins.BUILTIN[kind]]\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'sklearn', 'scipy'}))")
    assert _python(code) == "[]"
