"""The tools of the `swe` environment, acting on the episode's repository on the host.

Tool-call syntax (documented to the model in `TOOLS_HELP`): one `<tool>...</tool>` block per
turn; its first line is the command and its argument, later lines are the body.
List/read/search/edit/write/diff touch only text files inside the repository (paths are checked:
relative, no `..`, nothing under .git, size-capped) and never execute anything; `run_tests` runs
the visible tests in the sandbox on a copy of the repository. Every mistake (unknown command,
bad path, missing SEARCH text, oversize content) is returned as a tool error message, never raised.
"""

from __future__ import annotations

import os
import re
import subprocess

from adapters.sandbox.sandbox import Sandbox, SandboxError

MAX_FILE_CHARS = 50_000
MAX_FILES = 40
MAX_REPLY_CHARS = 4_000
GIT_TIMEOUT_SECONDS = 10
TOOL_CALL = re.compile(r"<tool>(.*?)</tool>", re.DOTALL)
_EDIT = re.compile(r"<<<<<<< SEARCH\n(.*?)\n?=======\n(.*?)\n?>>>>>>> REPLACE", re.DOTALL)

TOOLS_HELP = """You are fixing a bug in a small Python repository. Use exactly one tool per reply, written as
<tool>COMMAND ARGUMENT
optional body lines
</tool>
Commands:
- <tool>list</tool>: list the repository's files
- <tool>read PATH</tool>: show a file
- <tool>search TEXT</tool>: find lines containing TEXT
- <tool>edit PATH
<<<<<<< SEARCH
exact old lines
=======
new lines
>>>>>>> REPLACE
</tool>: replace the first occurrence of the old lines
- <tool>write PATH
whole new content
</tool>: replace a whole file
- <tool>run_tests</tool>: run python3 tests/test_core.py
- <tool>diff</tool>: show your changes (git diff)
- <tool>submit</tool>: finish; hidden tests then decide the reward."""


class ToolError(ValueError):
    """A tool call the environment refuses, with the message the model will read."""


def parse_call(action: str) -> tuple[str, str, str] | None:
    """(command, argument, body) of the first tool call in `action`, or None."""
    match = TOOL_CALL.search(action[:200_000])
    if match is None:
        return None
    head, _, body = match.group(1).strip("\n").partition("\n")
    command, _, argument = head.strip().partition(" ")
    return command.strip().lower(), argument.strip(), body


def safe_path(root: str, path: str) -> str:
    normal = os.path.normpath(path.strip().strip("'\"")) if path.strip() else ""
    if not normal or normal.startswith("..") or os.path.isabs(normal) or normal.split(os.sep)[0] == ".git":
        raise ToolError(f"bad path {path[:100]!r}: give a relative path inside the repository (see <tool>list</tool>)")
    return os.path.join(root, normal)


def repo_snapshot(root: str) -> dict[str, str]:
    files = {}
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != ".git")
        for name in sorted(names):
            full = os.path.join(folder, name)
            with open(full, encoding="utf-8", errors="replace") as handle:
                files[os.path.relpath(full, root)] = handle.read(MAX_FILE_CHARS + 1)
    return files


def run_tool(root: str, call: tuple[str, str, str], sandbox: Sandbox, timeout: float) -> str:
    command, argument, body = call
    try:
        if command == "list":
            return "\n".join(repo_snapshot(root))
        if command == "read":
            return _read(safe_path(root, argument))
        if command == "search":
            return _search(root, argument)
        if command in ("edit", "write"):
            return _edit(root, argument, body) if command == "edit" else _write(root, argument, body)
        if command == "run_tests":
            return _run_tests(root, sandbox, timeout)
        if command == "diff":
            return _git(root, "diff") or "no changes"
    except ToolError as exc:
        return f"tool error: {exc}"
    known = "list, read, search, edit, write, run_tests, diff, submit"
    return f"tool error: unknown command {command[:40]!r} (known: {known})"


def _read(path: str) -> str:
    if not os.path.isfile(path):
        raise ToolError(f"no such file {os.path.basename(path)!r}")
    with open(path, encoding="utf-8", errors="replace") as handle:
        text = handle.read(MAX_REPLY_CHARS + 1)
    return text if len(text) <= MAX_REPLY_CHARS else text[:MAX_REPLY_CHARS] + "\n[... cut]"


def _search(root: str, text: str) -> str:
    if not text:
        raise ToolError("search needs TEXT, e.g. <tool>search def </tool>")
    hits = [f"{path}:{n}: {line}" for path, content in repo_snapshot(root).items()
            for n, line in enumerate(content.splitlines(), 1) if text in line]  # fmt: skip
    return "\n".join(hits)[:MAX_REPLY_CHARS] or f"no line contains {text[:100]!r}"


def _write(root: str, path: str, body: str) -> str:
    full = safe_path(root, path)
    if len(body) > MAX_FILE_CHARS:
        raise ToolError(f"content of {len(body)} characters; at most {MAX_FILE_CHARS}")
    if not os.path.exists(full) and len(repo_snapshot(root)) >= MAX_FILES:
        raise ToolError(f"the repository already has {MAX_FILES} files")
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w", encoding="utf-8") as handle:
        handle.write(body)
    return f"wrote {os.path.relpath(full, root)} ({len(body)} characters)"


def _edit(root: str, path: str, body: str) -> str:
    full = safe_path(root, path)
    match = _EDIT.search(body)
    if match is None:
        raise ToolError("edit needs a body of <<<<<<< SEARCH / ======= / >>>>>>> REPLACE lines")
    if not os.path.isfile(full):
        raise ToolError(f"no such file {path[:100]!r}")
    with open(full, encoding="utf-8") as handle:
        content = handle.read()
    old, new = match.group(1), match.group(2)
    if not old or old not in content:
        raise ToolError(f"the SEARCH text was not found in {path[:100]!r}; copy it exactly from <tool>read {path[:100]}</tool>")
    return _write(root, path, content.replace(old, new, 1))


def _run_tests(root: str, sandbox: Sandbox, timeout: float) -> str:
    try:
        result = sandbox.run(repo_snapshot(root), ["/usr/bin/python3", "-I", "tests/test_core.py"], timeout=timeout)
    except SandboxError as exc:
        return f"tool error: the sandbox failed: {exc}"[:MAX_REPLY_CHARS]
    text = (result.stdout + result.stderr)[-MAX_REPLY_CHARS:]
    return f"{text}\n[{result.verdict}: {result.reason}]"


def _git(root: str, *args: str) -> str:
    done = subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, timeout=GIT_TIMEOUT_SECONDS, check=False)
    return (done.stdout + done.stderr)[:MAX_REPLY_CHARS]


def init_repo(root: str, files: dict[str, str]) -> None:
    """Write `files` under `root` and commit them in a fresh git repository."""
    for path, content in files.items():
        full = safe_path(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as handle:
            handle.write(content)
    env = {"GIT_AUTHOR_NAME": "rlsetup", "GIT_AUTHOR_EMAIL": "rlsetup@localhost", "GIT_COMMITTER_NAME": "rlsetup",
           "GIT_COMMITTER_EMAIL": "rlsetup@localhost", "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": root}  # fmt: skip
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "initial import"]):
        subprocess.run(["git", "-C", root, *args], capture_output=True, timeout=GIT_TIMEOUT_SECONDS, check=True, env=env)
