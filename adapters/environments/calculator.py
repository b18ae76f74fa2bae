"""A safe arithmetic evaluator: the `calculator` tool of the math environments.

The expression is parsed with `ast` and walked by hand; nothing is ever `eval`-ed. Only numbers,
parentheses, unary +/- and the binary operators + - * / // % ** are accepted. Everything is
bounded: the text length, the number of syntax nodes, the size of exponents and of every
intermediate result, so hostile input (`9**9**9`, `__import__('os')`, megabyte strings) fails
fast with a `CalculatorError` that the environment turns into a tool message.
Departure from Python: `^` means power (small models write `3^2`), and `×`/`÷` are accepted.
"""

from __future__ import annotations

import ast
import math
import operator

MAX_EXPRESSION_CHARS = 200
MAX_NODES = 100
MAX_ABS_VALUE = 10**30
MAX_EXPONENT = 64

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


class CalculatorError(ValueError):
    """The expression is not plain bounded arithmetic; the message says why."""


def evaluate(expression: str) -> int | float:
    """The value of an arithmetic expression, or `CalculatorError`."""
    text = _normalise(expression)
    tree = _parse(text)
    return _eval(tree.body)


def format_number(value: int | float) -> str:
    """`7`, `-2`, `0.3333333333`: integers without a decimal point, floats to 10 significant digits."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int):
        return str(value)
    return f"{value:.10g}"


def _normalise(expression: str) -> str:
    if not isinstance(expression, str):
        raise CalculatorError(f"expected text, got {type(expression).__name__}")
    text = expression.strip()
    if len(text) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression too long ({len(text)} characters; at most {MAX_EXPRESSION_CHARS})")
    text = text.rstrip("=").strip().replace("×", "*").replace("÷", "/").replace("^", "**")
    if not text:
        raise CalculatorError("empty expression")
    return text


def _parse(text: str) -> ast.Expression:
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError) as exc:
        raise CalculatorError(f"cannot parse {text!r}: {exc.msg if isinstance(exc, SyntaxError) else exc}") from None
    count = sum(1 for _ in ast.walk(tree))
    if count > MAX_NODES:
        raise CalculatorError(f"expression too complex ({count} syntax nodes; at most {MAX_NODES})")
    return tree


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant):
        return _number(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _checked(_UNARY[type(node.op)](_eval(node.operand)))
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            return _power(left, right)
        if type(node.op) in _BINARY:
            if right == 0 and isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)):
                raise CalculatorError("division by zero")
            return _checked(_BINARY[type(node.op)](left, right))
    raise CalculatorError(f"only numbers and + - * / // % ** are allowed, not {type(node).__name__}")


def _number(value: object) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CalculatorError(f"only numbers are allowed, not {type(value).__name__} {value!r:.40}")
    return _checked(value)


def _power(base: int | float, exponent: int | float) -> int | float:
    if abs(exponent) > MAX_EXPONENT:
        raise CalculatorError(f"exponent {format_number(exponent)} too large (at most {MAX_EXPONENT})")
    if base == 0 and exponent < 0:
        raise CalculatorError("division by zero")
    if abs(base) > 1 and exponent > 0 and exponent * math.log10(abs(base)) > math.log10(MAX_ABS_VALUE):
        raise CalculatorError(f"result too large (more than {MAX_ABS_VALUE:.0e})")
    result = base**exponent
    if isinstance(result, complex):
        raise CalculatorError("the result is not a real number")
    return _checked(result)


def _checked(value: int | float) -> int | float:
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("the result is not a finite number")
    if abs(value) > MAX_ABS_VALUE:
        raise CalculatorError(f"result too large (more than {MAX_ABS_VALUE:.0e})")
    return value
