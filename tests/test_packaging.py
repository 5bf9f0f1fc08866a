"""The package promises: zerosim never needs torch; the commands exist; the scenarios are sound."""

import ast
import json
import os
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import zerosim
from zerosim.scenario.load import load_scenario
from zerosim.analytic.model import total_params

from tests.conftest import ROOT, SCENARIOS

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def run(*argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=ENV, **kw)


def test_zerosim_imports_without_torch():
    names = [m.name for m in pkgutil.walk_packages(zerosim.__path__, "zerosim.")
             if not m.name.endswith(".__main__")]  # runs the CLI: test_python_dash_m_zerosim
    assert "zerosim.analytic.memory" in names and "zerosim.cli" in names
    code = ("import sys, importlib\n"
            f"for name in {names!r} + ['zerosim']: importlib.import_module(name)\n"
            "bad = [m for m in ('torch', 'zero_real') if m in sys.modules]\n"
            "assert not bad, bad\n")
    result = run(sys.executable, "-c", code)
    assert result.returncode == 0, result.stderr


def test_zerosim_sources_never_mention_torch_or_zero_real_imports():
    for path in Path(zerosim.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not any(n.split(".")[0] in ("torch", "zero_real") for n in names), path


def test_python_dash_m_zerosim():
    result = run(sys.executable, "-m", "zerosim", "memory", str(SCENARIOS / "zero_paper_7b5_64gpu.toml"),
                 "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["stages"][3]["model_states_bytes"] == 16 * 7_500_000_000 // 64


def _script(name: str) -> str:
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    assert found, f"console script {name} is not installed (pip install -e .)"
    return found


def test_console_scripts_are_installed():
    result = run(_script("zerosim"), "--version")
    assert result.returncode == 0 and result.stdout.strip() == f"zerosim {zerosim.__version__}"
    result = run(_script("zero-real"), "--help")
    assert result.returncode == 0 and "info" in result.stdout


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.toml")), ids=lambda p: p.name)
def test_every_scenario_loads_and_opens_with_a_comment(path):
    assert path.read_text(encoding="utf-8").startswith("# ")
    scenario = load_scenario(path)
    assert scenario.world_size >= 1 and total_params(scenario.model) > 0


def test_required_scenarios_exist_with_their_numbers():
    paper = load_scenario(SCENARIOS / "zero_paper_7b5_64gpu.toml")
    assert paper.model.params == 7_500_000_000 and paper.world_size == 64
    assert (paper.cluster.nodes, paper.cluster.gpus_per_node) == (8, 8)
    megatron = load_scenario(SCENARIOS / "megatron_7b5_64gpu.toml").model
    assert (megatron.layers, megatron.hidden, megatron.heads, megatron.vocab,
            megatron.max_seq_len) == (36, 4096, 32, 51200, 2048)
    assert total_params(load_scenario(SCENARIOS / "gpt3_175b_1024gpu.toml").model) == 174_604_259_328
    assert load_scenario(SCENARIOS / "gpt3_175b_1024gpu.toml").world_size == 1024
    tiny = sorted(SCENARIOS.glob("tiny_*.toml"))
    assert tiny, "a tiny_* scenario is required"
    for path in tiny:
        scenario = load_scenario(path)
        assert total_params(scenario.model) < 1_000_000 and 2 <= scenario.world_size <= 4


def test_zero_real_info_reports_this_torch():
    torch = pytest.importorskip("torch")
    result = run(_script("zero-real"), "info", "--json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["torch_version"] == torch.__version__
    assert info["gloo"] is True
    assert info["cuda_devices"] == [torch.cuda.get_device_name(i)
                                    for i in range(torch.cuda.device_count())]


def test_zero_real_without_torch_says_how_to_get_it():
    code = ("import sys; sys.modules['torch'] = None\n"
            "from zero_real.cli import main\n"
            "sys.exit(main(['info']))\n")
    result = run(sys.executable, "-c", code)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "zero-real: error: torch is not installed; install the build you want (e.g. pip install "
        "torch), then pip install 'zerosim[real]'"]


def test_the_version_is_the_projects():
    """zerosim/version.py and pyproject.toml say the same version (the page, --version and pip)."""
    import tomllib

    from tests.conftest import ROOT

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["version"] == zerosim.__version__
