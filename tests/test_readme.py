"""The README stays true: it opens with the two commands, and its Python example runs."""

from __future__ import annotations

import re
from pathlib import Path

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_readme_opens_with_the_two_commands() -> None:
    first_block = re.search(r"```bash\n(.*?)```", README, re.DOTALL)
    assert first_block is not None and README.index("```bash") < README.index("\n## ")
    commands = [line.split()[0] for line in first_block.group(1).splitlines() if line.strip()]
    assert commands == ["scripts/demo.sh", "scripts/test.sh"]
    for script in commands:
        assert (Path(__file__).resolve().parents[1] / script).stat().st_mode & 0o111


def test_readme_python_examples_run() -> None:
    for block in re.findall(r"```python\n(.*?)```", README, re.DOTALL):
        exec(compile(block, "README.md", "exec"), {})  # noqa: S102 -- the README's own examples, run as written
