"""Safe arithmetic: a whitelist over Python's expression grammar, never ``eval``.

Numbers, ``+ - * / // % **``, unary signs and parentheses; results and powers
are bounded so a hostile expression cannot exhaust memory or time.
"""

from __future__ import annotations

import ast
import math
import operator

MAX_EXPRESSION_CHARS = 200
MAX_MAGNITUDE = 1e12
MAX_EXPONENT = 16


class ExpressionError(ValueError):
    pass


_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def _value(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        if not math.isfinite(node.value) or abs(node.value) > MAX_MAGNITUDE:
            raise ExpressionError(f"number {node.value} is out of range")
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and (abs(right) > MAX_EXPONENT or abs(left) > MAX_MAGNITUDE):
            raise ExpressionError(f"power {left} ** {right} is too large")
        if isinstance(node.op, ast.Div | ast.FloorDiv | ast.Mod) and right == 0:
            raise ExpressionError("division by zero")
        result = _BINARY[type(node.op)](left, right)
        if isinstance(result, complex) or not math.isfinite(result) or abs(result) > MAX_MAGNITUDE:
            raise ExpressionError(f"result {result} is out of range")
        return result
    raise ExpressionError(f"{type(node).__name__} is not allowed in an arithmetic expression")


def safe_eval(expression: str) -> float:
    """The value of an arithmetic expression; anything else raises :class:`ExpressionError`."""
    if not isinstance(expression, str):
        raise ExpressionError(f"expression must be a string, got {type(expression).__name__}")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"not an expression: {exc.msg}") from None
    value = _value(tree.body)
    return float(value)
