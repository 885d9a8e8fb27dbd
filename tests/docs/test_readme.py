"""The README's shell sessions, run as written, in order, in one fresh directory, with the
binary under test first on PATH (and the test venv's python3, which has pyarrow).

How a block is read: `$ ` starts a command; the lines after it are what it printed. A command
that ends in `&` is one a reader starts in a second shell (the README says so beside it): it
runs in the background, the next command waits for its first line, and it is stopped at the
end of its block. Every command must succeed, except that `...; echo $?` must print the status
shown. Every line shown must be printed, numbers and keys aside (they differ each run)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from wirespeed_proc import BIN, ROOT  # noqa: E402

BACKGROUND = re.compile(r"^(.*?)&\s*(#.*)?$")


def sessions(readme: Path):
    """Each fenced block that holds commands, as [(command, [printed lines])]."""
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", readme.read_text(), re.S | re.M)
    for block in blocks:
        steps = []
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            elif steps:
                steps[-1][1].append(line)
        if steps:
            yield steps


def shape(text: str) -> str:
    """A line with its numbers and keys masked."""
    return re.sub(r"\d+", "#", re.sub(r"[0-9a-f]{16,}", "KEY", text)).strip()


def script(steps) -> str:
    """The block as one bash script: each command's status after a marker line."""
    lines = ["exec 2>&1"]
    for i, (command, _) in enumerate(steps):
        bg = BACKGROUND.match(command)
        if bg and not command.rstrip().endswith("&&"):
            log = f".bg{i}.log"
            lines += [f"{bg.group(1)} > {log} 2>&1 &",
                      f"for _ in $(seq 600); do [ -s {log} ] && break; sleep 0.1; done; sleep 0.2; cat {log}"]
            lines.append(f"echo __step {i} 0")
        else:
            lines += [command, f"echo __step {i} $?"]
    lines.append("kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; cat .bg*.log 2>/dev/null; rm -f .bg*.log; true")
    return "\n".join(lines) + "\n"


BLOCKS = list(sessions(ROOT / "README.md"))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("readme")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("n", range(len(BLOCKS)), ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_the_readme_runs_as_written(workdir, n):
    steps = BLOCKS[n]
    env = dict(os.environ, PATH=f"{BIN.parent}:{Path(sys.executable).parent}:{os.environ['PATH']}")
    env.pop("WIRESPEED_KEY", None)
    r = subprocess.run(["bash", "-c", script(steps)], cwd=workdir, env=env, capture_output=True, text=True,
                       timeout=540)
    out = r.stdout
    statuses = dict(re.findall(r"^__step (\d+) (\d+)$", out, re.M))
    printed = {shape(line) for line in out.splitlines()}
    for i, (command, shown) in enumerate(steps):
        assert statuses.get(str(i)) == "0", f"`{command}` failed:\n{out}"
        for line in shown:
            assert shape(line) in printed, f"`{command}` did not print {line!r}:\n{out}"
