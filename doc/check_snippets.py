"""Run the Python code blocks of the documentation pages.

Every ``.. code-block:: python`` of a page runs, in order, in one namespace
per page (later blocks may use names defined by earlier ones), in a fresh
interpreter.  A block whose first line is ``# not run`` is skipped (used for
code that needs a cluster or an optional package).  Pages are independent.

Usage (from the repository root)::

    python doc/check_snippets.py                       # every page
    python doc/check_snippets.py doc/user_guide/lgssm.rst  # some pages
    python doc/check_snippets.py -v ...                # also show the output

Exits with status 1 when a page fails.  Not part of the test suite: some
examples fit models for several seconds.
"""

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

DOC_DIR = Path(__file__).resolve().parent
BLOCK = re.compile(r"^( *)\.\. code-block:: python[ \t]*\n((?:\1 +:.*\n)*)\n", re.MULTILINE)


def code_blocks(text):
    """The dedented Python code blocks of an reStructuredText page, in order."""
    blocks = []
    for match in BLOCK.finditer(text):
        indent = len(match.group(1))
        lines = []
        for line in text[match.end() :].splitlines():
            if line.strip() and len(line) - len(line.lstrip()) <= indent:
                break
            lines.append(line)
        code = textwrap.dedent("\n".join(lines)).strip("\n")
        if not code.startswith("# not run"):
            blocks.append(code)
    return blocks


def run_page(path):
    """Run the blocks of one page in a subprocess; return (ok, seconds, output)."""
    blocks = code_blocks(Path(path).read_text(encoding="utf-8"))
    if not blocks:
        return True, 0.0, ""
    program = "\n\n".join(blocks) + "\n"
    environment = dict(os.environ)
    root = str(DOC_DIR.parent)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [root, environment.get("PYTHONPATH")]))
    environment.setdefault("MPLBACKEND", "Agg")
    started = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-c", program],
        cwd=root,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - started
    return completed.returncode == 0, seconds, completed.stdout + completed.stderr


def main(arguments):
    verbose = "-v" in arguments
    paths = [argument for argument in arguments if argument != "-v"]
    pages = [Path(p) for p in paths] or sorted(DOC_DIR.rglob("*.rst"))
    # auto_examples/ holds the gallery's generated pages: the docs build runs those scripts.
    pages = [p for p in pages if not {"_build", "auto_examples"} & set(p.parts)]
    failed = []
    for page in pages:
        ok, seconds, output = run_page(page)
        print(f"{'ok  ' if ok else 'FAIL'} {seconds:6.1f} s  {page}")
        if not ok:
            failed.append(page)
        if output.strip() and (verbose or not ok):
            print(textwrap.indent(output.rstrip(), "    "))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
