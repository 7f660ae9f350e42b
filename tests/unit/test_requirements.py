"""requirements.in names what the code imports: every third-party package imported is listed, and every
package listed (above its constraints) is imported somewhere. What `make setup` installs is pinned: the
lock, pip itself and the build backend."""

import ast
import re
import sys
import tomllib
from functools import cache
from importlib.metadata import distributions, packages_distributions, requires, version
from pathlib import Path

from infra.deployment import REPO

OWN = {
    "batch_layer",
    "bench",
    "dags",
    "domains",
    "infra",
    "lake",
    "lambdalake",
    "serving_layer",
    "speed_layer",
    "tests",
    "views",
}


def _imported() -> set[str]:
    """Top-level names of the modules every Python file of the repository imports."""
    names = set()
    for path in REPO.glob("*/**/*.py"):
        if path.relative_to(REPO).parts[0] not in OWN:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return names - OWN - set(sys.stdlib_module_names) - {"__future__"}


def _listed() -> dict[str, set[str]]:
    """requirements.in's packages above its constraints: name -> the modules it provides (a package
    that provides none, like apache-airflow, provides its own requirements' modules)."""
    requirements = Path(REPO / "requirements.in").read_text().split("# constraints")[0]
    names = [
        line.split("==")[0].split("[")[0].strip()
        for line in requirements.splitlines()
        if line.strip() and not line.startswith("#")
    ]
    return {name: _modules(name) or set().union(*map(_modules, _requirements(name))) for name in names}


def _key(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


@cache
def _owners() -> dict[str, set[str]]:
    """Installed distribution -> the top-level modules it provides."""
    found: dict[str, set[str]] = {}
    for module, names in packages_distributions().items():
        for distribution in names:
            found.setdefault(_key(distribution), set()).add(module)
    return found


def _modules(distribution: str) -> set[str]:
    return _owners().get(_key(distribution), set())


def _requirements(distribution: str) -> list[str]:
    """The distributions ``distribution`` always needs (no extras, no markers)."""
    return [
        re.split(r"[^A-Za-z0-9_.-]", line, maxsplit=1)[0] for line in requires(distribution) or () if ";" not in line
    ]


def test_every_imported_package_is_listed_and_every_listed_one_imported():
    imported, listed = _imported(), _listed()
    provided = set().union(*listed.values())
    assert sorted(imported - provided) == []
    assert sorted(name for name, modules in listed.items() if not modules & imported) == []


def test_the_lock_pip_uv_and_the_build_backend_are_exact_pins_of_what_built_this_venv():
    """Every line of requirements.txt is ``name==version``; the Makefile installs pip and uv at this venv's
    versions; pyproject.toml builds lambdalake with the setuptools that built the installed lambdalake."""
    lock = [line for line in (REPO / "requirements.txt").read_text().splitlines() if line and not line.startswith("#")]
    assert [line for line in lock if not re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][A-Za-z0-9_.+!-]*", line)] == []
    assert re.findall(r"-m pip install -q (pip\S*) (uv\S*)", (REPO / "Makefile").read_text()) == [
        (f"pip=={version('pip')}", f"uv=={version('uv')}")
    ]
    build = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]
    # the installed one, not the egg-info the editable build leaves in the repository (no WHEEL there)
    [wheel] = filter(None, (found.read_text("WHEEL") for found in distributions(name="lambdalake")))
    built_by = re.search(r"^Generator: setuptools \((.+)\)$", wheel, re.M)[1]
    assert build == {"requires": [f"setuptools=={built_by}"], "build-backend": "setuptools.build_meta"}
