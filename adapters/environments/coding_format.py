"""How coding environments read the model's answer: strip reasoning, take the code block.

The model answers in Markdown: the last fenced block (```python ... ``` or a bare ``` ... ```)
is the code; without a fence the whole reply is taken as code. `<think>...</think>` reasoning is
dropped first, so code sketched while thinking is never run. Replies are cut at
`MAX_ACTION_CHARS` and code at `MAX_CODE_CHARS`; `syntax_error` parses (never runs) the code on
the host so that text which is not Python costs no sandbox run.
"""

from __future__ import annotations

import ast
import re
import warnings

MAX_ACTION_CHARS = 100_000
MAX_CODE_CHARS = 30_000
_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]{0,20})[ \t]*\n(.*?)```", re.DOTALL)


def strip_reasoning(action: str) -> str:
    text = action if isinstance(action, str) else str(action)
    return _THINK.sub("", text[:MAX_ACTION_CHARS])


def extract_code(action: str) -> str:
    """The code the reply submits (possibly empty)."""
    text = strip_reasoning(action)
    blocks = _FENCE.findall(text)
    python = [body for lang, body in blocks if lang.lower() in ("python", "py", "python3", "")]
    code = python[-1] if python else (blocks[-1][1] if blocks else text)
    return code.strip("\n")[:MAX_CODE_CHARS]


def syntax_error(code: str) -> str | None:
    """None when `code` parses as Python, else a one-line description (nothing is executed)."""
    if not code.strip():
        return "no code found: put the program in a ```python code block"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(code)
    except SyntaxError as exc:
        return f"SyntaxError: {exc.msg} (line {exc.lineno})"
    except (ValueError, MemoryError, RecursionError) as exc:
        return f"cannot parse the code: {type(exc).__name__}"
    return None


def fenced(code: str) -> str:
    """`code` as the model should write it (used for reference answers)."""
    return f"```python\n{code.rstrip()}\n```"
