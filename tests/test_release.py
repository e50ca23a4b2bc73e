"""The release artefact: ``python -m build`` makes an sdist and a wheel (the wheel built
from the sdist, so the sdist is complete), ``twine check`` passes, and the wheel,
installed into a fresh virtual environment with no checkout on the import path, runs
``unified-opt conformance --backends torch --algorithms adam,lamb``, ``unified-opt
check`` on a factory of a temporary project, and the pytest plugin there.

The fresh environment gets the wheel alone (``pip install --no-deps``); its
dependencies (numpy, torch, ...) come from this environment's site-packages through a
folder of links that leaves out everything of unified-opt's own (the editable install's
finder, its metadata), so nothing downloads and nothing of the checkout leaks in. The
build runs once per session, without isolation (setuptools from the test extra), offline.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import unified_opt as uo

ROOT = Path(__file__).resolve().parents[1]


def _run(command, cwd, env=None, timeout=600):
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, (f"{command}\n{done.stdout[-5000:]}\n{done.stderr[-5000:]}")
    return done.stdout


@pytest.fixture(scope="session")
def dist(tmp_path_factory):
    pytest.importorskip("build")
    out = tmp_path_factory.mktemp("dist")
    # sdist first, then the wheel from the unpacked sdist (build's default for both)
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out)], cwd=ROOT)
    sdists, wheels = sorted(out.glob("*.tar.gz")), sorted(out.glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, sorted(out.iterdir())
    return sdists[0], wheels[0]


def test_the_artefacts_are_named_by_the_one_version(dist):
    sdist, wheel = dist
    assert sdist.name == f"unified_opt-{uo.__version__}.tar.gz"
    assert wheel.name == f"unified_opt-{uo.__version__}-py3-none-any.whl"
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject
    assert not re.search(r'^version\s*=\s*"', pyproject, re.M)      # no second source
    assert "## Unreleased" in (ROOT / "CHANGELOG.md").read_text()


def test_twine_check_passes(dist):
    pytest.importorskip("twine")
    out = _run([sys.executable, "-m", "twine", "check", "--strict", *map(str, dist)], cwd=ROOT)
    assert out.count("PASSED") == 2, out


def test_the_wheel_holds_the_package(dist):
    names = set(zipfile.ZipFile(dist[1]).namelist())
    for path in ("unified_opt/py.typed", "unified_opt/kernels/vm.cc",
                 "unified_opt/kernels/phases.h", "unified_opt/backends/torch/__init__.py",
                 "unified_opt/conformance/pytest_plugin.py", "unified_opt/cli.py"):
        assert path in names, path
    assert not any(n.startswith(("tests/", "docs/", "examples/", "backends/", "conformance/"))
                   for n in names)
    metadata = zipfile.ZipFile(dist[1]).read(
        f"unified_opt-{uo.__version__}.dist-info/entry_points.txt").decode()
    assert "unified-opt = unified_opt.cli:main" in metadata
    assert "unified-opt = unified_opt.conformance.pytest_plugin" in metadata


def _site_dirs() -> list[Path]:
    """The folders this interpreter imports third-party packages from: sys.path without
    the standard library (site-packages below it stays) and without the checkout."""
    stdlib = {Path(sysconfig.get_paths()[k]).resolve() for k in ("stdlib", "platstdlib")}
    out = []
    for entry in sys.path:
        path = Path(entry or ".").resolve()
        installed = bool({"site-packages", "dist-packages"} & set(path.parts))
        # a virtual environment inside the checkout (CI's .venv) is installed packages;
        # the checkout's own folders are not
        if not path.is_dir() or (path.is_relative_to(ROOT) and not installed) \
                or path in out:
            continue
        if any(path.is_relative_to(s) for s in stdlib) and not installed:
            continue
        out.append(path)
    return out


def _dependencies(folder: Path) -> Path:
    """This environment's packages as links, without unified-opt's own entries."""
    folder.mkdir()
    for site in _site_dirs():
        for entry in site.iterdir():
            name = entry.name.lower()
            if ("unified_opt" in name or name.startswith("__editable__")
                    or name.endswith(".pth") or (folder / entry.name).exists()):
                continue
            (folder / entry.name).symlink_to(entry)
    return folder


@pytest.fixture(scope="session")
def venv(dist, tmp_path_factory):
    """A fresh virtual environment holding the wheel, and a clean environment for it."""
    if "torch" not in uo.backends():
        pytest.skip("the wheel's commands run the torch backend")
    base = tmp_path_factory.mktemp("fresh")
    env_dir = base / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], cwd=base)
    python = env_dir / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
          "--no-index", "--no-cache-dir", "-q", str(dist[1])], cwd=base)
    deps = _dependencies(base / "deps")
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                    "['purelib'])"], cwd=base).strip()
    (Path(purelib) / "_dependencies.pth").write_text(f"{deps}\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTEST_ADDOPTS")}
    env.update(PATH=f"{env_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}",
               PYTHONNOUSERSITE="1", PYTHONDONTWRITEBYTECODE="1")
    return env_dir, env, base


def test_the_fresh_environment_imports_the_wheel_not_the_checkout(venv):
    env_dir, env, base = venv
    out = _run([str(env_dir / "bin" / "python"), "-c",
                "import json, sys, importlib.metadata as m, unified_opt, "
                "unified_opt.backends.torch, unified_opt.conformance; print(json.dumps("
                "{'files': [unified_opt.__file__, unified_opt.backends.torch.__file__, "
                "unified_opt.conformance.__file__], 'path': sys.path, "
                "'version': unified_opt.__version__, 'dist': m.version('unified-opt'), "
                "'dists': [str(d._path) for d in m.distributions() "
                "if d.metadata['Name'] == 'unified-opt']}))"], cwd=base, env=env)
    seen = json.loads(out)
    for path in seen["files"]:
        assert Path(path).resolve().is_relative_to(env_dir.resolve()), path
    assert not any(p and Path(p).resolve().is_relative_to(ROOT) for p in seen["path"]), \
        seen["path"]
    assert seen["version"] == seen["dist"] == uo.__version__
    assert len(seen["dists"]) == 1 and seen["dists"][0].startswith(str(env_dir))


def test_the_conformance_command_from_the_wheel(venv, tmp_path):
    env_dir, env, base = venv
    out_dir = tmp_path / "report"
    _run([str(env_dir / "bin" / "unified-opt"), "conformance", "--backends", "torch",
          "--algorithms", "adam,lamb", "--out", str(out_dir)], cwd=tmp_path, env=env)
    report = json.loads((out_dir / "report.json").read_text())
    assert report["summary"]["fail"] == 0 and report["summary"]["error"] == 0
    assert report["summary"]["pass"] > 0
    assert {r["algorithm"] for r in report["results"]} == {"adam", "lamb"}
    assert report["unified_opt_version"] == uo.__version__


def test_check_and_the_pytest_plugin_in_a_project(venv, tmp_path):
    env_dir, env, base = venv
    project = tmp_path / "project"
    shutil.copytree(ROOT / "examples" / "check_project", project)
    out = _run([str(env_dir / "bin" / "unified-opt"), "check", "mypkg.optim:make_lamb",
                "--spec", "lamb(lr=1e-3, weight_decay=0.01)"], cwd=project, env=env)
    assert "PASS" in out
    # the plugin comes in through the wheel's pytest11 entry point, from the venv
    out = _run([str(env_dir / "bin" / "python"), "-m", "pytest", "-q", "-p",
                "no:cacheprovider", "--trace-config"], cwd=project, env=env)
    assert "1 passed" in out
    plugin = next(line for line in out.splitlines() if "pytest_plugin.py" in line)
    assert str(env_dir) in plugin and str(ROOT) not in plugin, plugin
