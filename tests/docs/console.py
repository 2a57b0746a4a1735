"""Worked examples in the docs: the format, its parser and a persistent bash session.

The format (shared by every page of `docs/` and `README.md`):

- an example is a fenced block whose info string is `console`;
- a line starting with `$ ` is a command; a command line ending with `\\` continues on the
  next line (whatever that line starts with);
- the lines after a command, up to the next `$ ` line or the end of the block, are its
  expected output, compared like doctest with ELLIPSIS (`...` matches anything, across
  lines too) and NORMALIZE_WHITESPACE; no lines means no output;
- a command must exit 0, unless the expected output's last line is `[exit N]`, which
  asserts that exit status instead;
- a block immediately preceded by the line `<!-- docs-test: skip (reason) -->` is not run;
  the reason must not be empty.

All the commands of one page run, in order, in one bash session (so a variable set in one
block is visible in later blocks of the page), started in the repository root.
"""

from __future__ import annotations

import contextlib
import doctest
import os
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

FENCE_OPEN = "```console"
FENCE_CLOSE = "```"
EXIT_LINE = re.compile(r"^\[exit (\d+)\]$")
DIRECTIVE = re.compile(r"^<!--\s*docs-test:(.*?)-->\s*$")
SKIP = re.compile(r"^\s*skip\s*(?:\((.*)\))?\s*$")
OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


class FormatError(ValueError):
    """A page breaks the worked-example format (names the file and line)."""


@dataclass
class Command:
    path: str
    line: int  # 1-based line of the `$ ` line in the page
    text: str  # the command, continuation lines joined with newlines, without `$ `
    expected: str  # expected output, without a trailing `[exit N]`
    exit_code: int = 0

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass
class Block:
    path: str
    line: int  # 1-based line of the opening fence
    commands: list[Command] = field(default_factory=list)
    skip_reason: str | None = None  # set: the block is not run


def parse(text: str, path: str) -> list[Block]:
    """Every console block of a page, in order. Raises FormatError for a skip directive
    without a reason, a directive that is not right before a block, output before the
    first command, or an unterminated block."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        raw = lines[i]
        m = DIRECTIVE.match(raw.strip())
        if m:
            nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
            if nxt != FENCE_OPEN:
                raise FormatError(
                    f"{path}:{i + 1}: a docs-test directive must be the line right before a "
                    f"```console block"
                )
        if raw.strip() != FENCE_OPEN:
            i += 1
            continue
        start = i + 1
        skip: str | None = None
        prev = DIRECTIVE.match(lines[i - 1].strip()) if i > 0 else None
        if prev:
            s = SKIP.match(prev.group(1))
            if not s:
                raise FormatError(f"{path}:{i}: unknown docs-test directive {lines[i - 1]!r}")
            reason = (s.group(1) or "").strip()
            if not reason:
                raise FormatError(
                    f"{path}:{i}: `docs-test: skip` needs a reason: "
                    f"<!-- docs-test: skip (why this block cannot run) -->"
                )
            skip = reason
        body: list[tuple[int, str]] = []
        i += 1
        while i < len(lines) and lines[i].strip() != FENCE_CLOSE:
            body.append((i + 1, lines[i]))
            i += 1
        if i >= len(lines):
            raise FormatError(f"{path}:{start}: ```console block is not closed")
        i += 1
        block = Block(path, start, skip_reason=skip)
        block.commands = _commands(body, path)
        blocks.append(block)
    return blocks


def _commands(body: list[tuple[int, str]], path: str) -> list[Command]:
    out: list[Command] = []
    j = 0
    while j < len(body):
        lineno, line = body[j]
        if not line.startswith("$ "):
            if line.strip():
                raise FormatError(f"{path}:{lineno}: output before the first `$ ` command")
            j += 1
            continue
        parts = [line[2:]]
        while parts[-1].endswith("\\") and j + 1 < len(body):
            j += 1
            parts.append(body[j][1])
        j += 1
        expected: list[str] = []
        while j < len(body) and not body[j][1].startswith("$ "):
            expected.append(body[j][1])
            j += 1
        while expected and not expected[-1].strip():
            expected.pop()
        code = 0
        if expected:
            m = EXIT_LINE.match(expected[-1].strip())
            if m:
                code = int(m.group(1))
                expected.pop()
        out.append(Command(path, lineno, "\n".join(parts), "\n".join(expected), code))
    return out


def matches(expected: str, got: str) -> bool:
    want = expected + "\n" if expected else ""
    return doctest.OutputChecker().check_output(want, got, OPTIONS)


def difference(expected: str, got: str) -> str:
    example = doctest.Example("command", expected + "\n" if expected else "")
    return doctest.OutputChecker().output_difference(example, got, OPTIONS)


class Session:
    """One bash process; `run(command)` runs it in that shell (variables, functions and the
    working directory persist) and returns (exit status, stdout+stderr)."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="spindle-docs-sh-"))
        self.n = 0
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: close() ends all of it
        )

    def run(self, command: str, timeout_s: float) -> tuple[int, str]:
        self.n += 1
        script = self.dir / f"{self.n}.sh"
        out = self.dir / f"{self.n}.out"
        rc = self.dir / f"{self.n}.rc"
        script.write_text(command + "\n")
        assert self.proc.stdin is not None
        # Sourced, so the command runs in the session's shell; stdin is not the session's.
        self.proc.stdin.write(
            f". {script} > {out} 2>&1 < /dev/null\n"
            f"echo $? > {rc}.tmp && mv {rc}.tmp {rc}\n".encode()
        )
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout_s
        while not rc.exists():
            if self.proc.poll() is not None:
                text = out.read_text(errors="replace") if out.exists() else ""
                raise RuntimeError(
                    f"the shell exited ({self.proc.returncode}) during the command; output:\n{text}"
                )
            if time.monotonic() > deadline:
                text = out.read_text(errors="replace") if out.exists() else ""
                self.close()
                raise TimeoutError(f"no end after {timeout_s:g}s; output so far:\n{text}")
            time.sleep(0.05)
        return int(rc.read_text().strip()), out.read_text(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if self.dir.exists():
            for f in self.dir.iterdir():
                f.unlink()
            self.dir.rmdir()


__all__ = [
    "Block",
    "Command",
    "FormatError",
    "Session",
    "difference",
    "matches",
    "parse",
]
