"""Docstring, comment and code lines of the application, and its largest modules (issue 23).

    .venv/bin/python -m bench.code_stats [--largest 5] [PATH ...]   (default: app jobs)

Docstring lines are the lines a module, class or function docstring spans; comment lines are lines holding a
`#` comment (own-line or trailing); code lines are the other non-blank lines. Prints figures only.
"""

from __future__ import annotations

import argparse
import ast
import io
import tokenize
from dataclasses import dataclass
from pathlib import Path


@dataclass
class FileStats:
    path: Path
    lines: int
    docstring: int
    comment: int
    code: int


def _docstring_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if (first := _docstring_node(node)) is not None:
            lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def _docstring_node(node: ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> ast.Expr | None:
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        return body[0] if isinstance(body[0].value.value, str) else None
    return None


def file_stats(path: Path) -> FileStats:
    source = path.read_text(encoding="utf-8")
    docstring = _docstring_lines(ast.parse(source))
    comment: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comment.add(token.start[0])
    text_lines = source.splitlines()
    nonblank = {number for number, line in enumerate(text_lines, 1) if line.strip()}
    own_line_comments = {n for n in comment if text_lines[n - 1].lstrip().startswith("#")}
    code = nonblank - docstring - own_line_comments
    return FileStats(path, len(text_lines), len(docstring), len(comment), len(code))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=["app", "jobs"])
    parser.add_argument("--largest", type=int, default=5)
    args = parser.parse_args()
    files = sorted(p for root in args.paths for p in Path(root).rglob("*.py"))
    stats = [file_stats(p) for p in files]
    docstring = sum(s.docstring for s in stats)
    comment = sum(s.comment for s in stats)
    code = sum(s.code for s in stats)
    total = sum(s.lines for s in stats)
    print(f"files {len(stats)}, lines {total}, code lines {code}")
    print(f"docstring lines {docstring}, comment lines {comment} ({(docstring + comment) / code:.1%} of code lines)")
    print("largest modules:")
    for s in sorted(stats, key=lambda s: s.lines, reverse=True)[: args.largest]:
        print(f"  {s.lines:5d}  {s.path}  (docstring {s.docstring}, comment {s.comment})")
    long_module_docs = [(s.path, n) for s in stats if (n := _module_docstring_length(s.path)) > 5]
    print(f"module docstrings over 5 lines: {len(long_module_docs)}")
    for path, n in sorted(long_module_docs, key=lambda item: item[1], reverse=True)[:10]:
        print(f"  {n:3d}  {path}")


def _module_docstring_length(path: Path) -> int:
    node = _docstring_node(ast.parse(path.read_text(encoding="utf-8")))
    return 0 if node is None else (node.end_lineno or node.lineno) - node.lineno + 1


if __name__ == "__main__":
    main()
