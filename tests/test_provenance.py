"""jaxdebate.provenance on a real git checkout: the commit, and ``dirty`` for code but not results."""

import subprocess

from jaxdebate.provenance import provenance


def _git(repo, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                          check=True, capture_output=True, text=True).stdout.strip()


def test_dirty_means_code_differs_not_results(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "table.md").write_text("| a |\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "first")
    head = _git(tmp_path, "rev-parse", "HEAD")
    assert provenance(tmp_path)["commit"] == head and provenance(tmp_path)["dirty"] is False

    (tmp_path / "results" / "table.md").write_text("| b |\n")  # a driver's report between runs
    (tmp_path / "results" / "new.json").write_text("{}")
    (tmp_path / "scratch.txt").write_text("untracked\n")
    assert provenance(tmp_path)["dirty"] is False

    (tmp_path / "code.py").write_text("x = 2\n")
    assert provenance(tmp_path)["dirty"] is True
