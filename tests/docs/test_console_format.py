"""The worked-example format (tests/docs/console.py): parsing, skips, exit codes, matching
and the persistent shell. Fast: no platform."""

from __future__ import annotations

from pathlib import Path

import pytest

from .console import FormatError, Session, matches, parse

PAGE = """\
Intro.

```console
$ X=1
$ echo "a b" \\
    "$X"
a   b
1
$ false
[exit 1]
```

<!-- docs-test: skip (needs a browser) -->
```console
$ open http://127.0.0.1:8080/ui/
```

```sh
$ not a console block
```
"""


def test_parse_commands_outputs_and_skips() -> None:
    blocks = parse(PAGE, "page.md")
    assert len(blocks) == 2
    first, second = blocks
    assert first.skip_reason is None and first.line == 3
    assert [c.text for c in first.commands] == ["X=1", 'echo "a b" \\\n    "$X"', "false"]
    assert [c.line for c in first.commands] == [4, 5, 9]
    assert first.commands[1].expected == "a   b\n1"
    assert first.commands[2].expected == "" and first.commands[2].exit_code == 1
    assert first.commands[0].where == "page.md:4"
    assert second.skip_reason == "needs a browser"


@pytest.mark.parametrize(
    "marker",
    ["<!-- docs-test: skip -->", "<!-- docs-test: skip () -->", "<!-- docs-test: skip (  ) -->"],
)
def test_a_skip_needs_a_reason(marker: str) -> None:
    with pytest.raises(FormatError, match="needs a reason"):
        parse(f"{marker}\n```console\n$ true\n```\n", "page.md")


def test_misplaced_or_unknown_directives_fail() -> None:
    with pytest.raises(FormatError, match="right before"):
        parse("<!-- docs-test: skip (x) -->\n\n```console\n$ true\n```\n", "p.md")
    with pytest.raises(FormatError, match="unknown"):
        parse("<!-- docs-test: only (x) -->\n```console\n$ true\n```\n", "p.md")
    with pytest.raises(FormatError, match="not closed"):
        parse("```console\n$ true\n", "p.md")
    with pytest.raises(FormatError, match="before the first"):
        parse("```console\nhello\n$ true\n```\n", "p.md")


def test_matching_is_doctest_with_ellipsis_and_whitespace() -> None:
    assert matches('{"id": "...", "n": 1}', '{"id": "3f0c-11", "n": 1}\n')
    assert matches("a ...\nz", "a b\nc\nd\nz\n")
    assert matches("x   y\n\n", "x y\n")
    assert not matches("a", "b\n")
    assert not matches("", "something\n")
    assert matches("", "")


def test_session_keeps_state_and_reports_exit_codes(tmp_path: Path) -> None:
    s = Session(tmp_path, {"PATH": "/usr/bin:/bin"})
    try:
        assert s.run("X=41; f() { echo $((X + 1)); }", 10) == (0, "")
        assert s.run("f; echo err >&2", 10) == (0, "42\nerr\n")
        assert s.run("cd /; pwd; (exit 3)", 10) == (3, "/\n")
        assert s.run("pwd", 10) == (0, "/\n")
        with pytest.raises(TimeoutError):
            s.run("sleep 5", 0.5)
    finally:
        s.close()
