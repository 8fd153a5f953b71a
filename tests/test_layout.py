"""The project's layout holds: each folder imports only the folders below it (modeling_xpt <-
tokenization <- training <- cards), the remote-code files import no project module, and no source
file edits sys.path or grows past 500 lines (the remote-code model file 550)."""
from __future__ import annotations

import ast

import pytest

from tests.conftest import REPO_ROOT

# what each folder may import from the project (beside itself)
ALLOWED = {
    "modeling_xpt": set(),
    "tokenization": {"modeling_xpt"},
    "training": {"modeling_xpt", "tokenization"},
    "cards": {"modeling_xpt", "tokenization", "training"},
}
MAX_LINES = 500
# The remote-code model file holds the whole model with its task heads (a Hub reader reads it in one sitting)
REMOTE_MODEL_MAX_LINES = 550


def project_imports(path) -> set[str]:
    """The project folders a module imports (absolute imports, at any depth in the file)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
        found |= {name.split(".")[0] for name in names} & set(ALLOWED)
    return found


@pytest.mark.parametrize("folder", sorted(ALLOWED))
def test_each_folder_imports_only_the_folders_below_it(folder):
    for path in sorted((REPO_ROOT / folder).glob("*.py")):
        wrong = project_imports(path) - ALLOWED[folder] - {folder}
        assert not wrong, f"{path.relative_to(REPO_ROOT)} imports {sorted(wrong)}"


def test_remote_code_imports_no_project_module():
    for name in ("modeling_xpt.py", "configuration_xpt.py"):
        path = REPO_ROOT / "modeling_xpt" / name
        assert project_imports(path) == set(), name
        tree = ast.parse(path.read_text(encoding="utf-8"))
        relative = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level}
        assert relative <= {"configuration_xpt"}, (name, relative)


@pytest.mark.parametrize("folder", sorted(ALLOWED))
def test_source_files_are_short_and_leave_sys_path_alone(folder):
    for path in sorted((REPO_ROOT / folder).glob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert "sys.path" not in text, f"{path.relative_to(REPO_ROOT)} edits sys.path"
        limit = REMOTE_MODEL_MAX_LINES if path == REPO_ROOT / "modeling_xpt" / "modeling_xpt.py" else MAX_LINES
        assert text.count("\n") < limit, f"{path.relative_to(REPO_ROOT)}: {text.count(chr(10))} lines"
