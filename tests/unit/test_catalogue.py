"""The table catalogue (views.tables) is the one place that names the platform's tables: outside it,
no code passes a literal name to ``Deployment.table``, and the catalogue names each table once."""

import ast

from infra.deployment import REPO
from views import domain, tables

LAYERS = ("batch_layer", "dags", "domains", "infra", "lake", "lambdalake", "serving_layer", "speed_layer", "views")


def _literal_table_calls() -> list[str]:
    found = []
    for layer in LAYERS:
        for path in sorted((REPO / layer).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "table"
                    and node.args
                    and isinstance(node.args[0], (ast.Constant, ast.JoinedStr))
                ):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def test_no_layer_spells_a_table_path():
    assert _literal_table_calls() == []


def test_every_table_is_named_once():
    for name in ("clickstream", "ads"):
        dimensions = [table for d in domain(name).dimensions for table in (tables.changes(d), tables.dimension(d))]
        names = [table.name for table in (*tables.PLATFORM, *dimensions)]
        assert len(names) == len(set(names)), names
