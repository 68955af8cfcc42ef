"""The browser modules' unit tests, run with Node.js's own runner (``node --test tests/js``).

They exercise plain-JavaScript logic that needs no DOM (the thread page's live-run state
machine, ``templates/static/chat/app/live-run.js``) with fakes; the pages themselves are
covered in Chromium by ``tests/e2e/``. Skipped when Node.js 20+ is missing, unless ``CI=true``:
then it fails, so CI always runs them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
JS_TESTS = REPO / "tests" / "js"
MIN_NODE = 20  # ES-module syntax detection for the static files (they have no package.json)


def _node() -> tuple[str | None, str | None]:
    """(path to node, None) or (None, why it cannot be used)."""
    node = shutil.which("node")
    if node is None:
        return None, "Node.js is not installed (node not on PATH)"
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    match = re.match(r"v(\d+)\.", version)
    if not match or int(match.group(1)) < MIN_NODE:
        return None, f"Node.js {MIN_NODE}+ is needed, found {version or 'an unknown version'}"
    return node, None


def test_js_unit_tests_pass():
    node, problem = _node()
    if problem:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true requires the JavaScript unit tests: {problem}")
        pytest.skip(problem)
    result = subprocess.run([node, "--test", str(JS_TESTS.relative_to(REPO))], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    report = result.stdout[-6000:] + result.stderr[-3000:]
    assert result.returncode == 0, report
    counts = {k: int(v) for k, v in re.findall(r"^# (tests|pass|fail) (\d+)$", result.stdout, re.M)}
    assert counts.get("fail") == 0 and counts.get("pass", 0) > 0, report
    assert counts["pass"] == counts["tests"], report


def test_every_page_script_parses_as_a_module():
    """Each page script (``templates/static/**/*.js``, not ``vendor/``) parses as an ES module:
    a merge that imports one name twice ("Identifier 'gettext' has already been declared")
    stops the whole page's module graph, and only a browser would show it."""
    node, problem = _node()
    if problem:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true requires the JavaScript checks: {problem}")
        pytest.skip(problem)
    scripts = sorted(p for p in (REPO / "templates" / "static").rglob("*.js") if "vendor" not in p.parts)
    assert len(scripts) > 20
    broken = []
    for script in scripts:
        result = subprocess.run([node, "--experimental-default-type=module", "--check", str(script)],
                                capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            errors = [line for line in result.stderr.splitlines() if "Error" in line] or [result.stderr.strip()]
            broken.append(f"{script.relative_to(REPO)}: {errors[0]}")
    assert not broken, "\n".join(broken)
