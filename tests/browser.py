"""What a page looks like to a person, asked of headless Chromium (Debian's package; `.ci/run`
installs it through `make system-deps`): a script measures the laid-out page and Chromium's dump of
the DOM brings its answer back as JSON."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest


def chromium() -> str:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.fail("chromium is not installed (.ci/run installs it through `make system-deps`)")
    return browser


def measure(page: Path, tmp: Path, expression: str, width: int | None = None) -> object:
    """The JSON value of the JavaScript ``expression``, evaluated on ``page`` as Chromium lays it out
    (at ``width`` px when given)."""
    probe = tmp / f"probe-{page.name}"
    script = (
        f"<script>const p=document.createElement('pre');p.id='measured';"
        f"p.textContent=JSON.stringify({expression});document.body.appendChild(p);</script>"
    )
    probe.write_text(
        page.read_text(encoding="utf-8").replace("</body>", script + "</body>"), encoding="utf-8"
    )
    size = [f"--window-size={width},1200"] if width else []
    dom = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", *size, "--dump-dom", probe.as_uri()],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    found = re.search(r"<pre id=\"measured\">(.*?)</pre>", dom, re.S)
    assert found, dom[-500:]
    return json.loads(html.unescape(found.group(1)))
