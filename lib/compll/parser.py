"""Text -> syntax tree, with every failure turned into a ``CompLLError`` at ``file:line:col``."""

from __future__ import annotations

import functools
import math
import re

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import (
    LarkError,
    UnexpectedCharacters,
    UnexpectedEOF,
    UnexpectedInput,
    UnexpectedToken,
    VisitError,
)

from hipress.suggest import VERY_CLOSE, suggestion

from . import ast
from .errors import CompLLError
from .grammar import GRAMMAR
from .limits import MAX_BLOCKS, MAX_CHAIN, MAX_DEPTH, PARSE_DEPTH, PARSE_STMT_DEPTH, too_deep_hint

MAX_SOURCE = 1 << 20  # a spec is a few dozen lines; a megabyte is a mistake, not a spec

# Readable names for the terminals lark reports as expected.
_TERMINAL_TEXT = {
    "NAME": "a name",
    "INT_LIT": "an integer",
    "FLOAT_LIT": "a number",
    "STRING": 'a "string"',
    "STAR": "'*'",
    "$END": "end of file",
}


@functools.lru_cache(maxsize=1)
def _parser() -> Lark:
    return Lark(GRAMMAR, parser="lalr", propagate_positions=True, maybe_placeholders=True)


def _pos(meta_or_tok) -> ast.Pos:
    line = getattr(meta_or_tok, "line", None)
    col = getattr(meta_or_tok, "column", None)
    return ast.Pos(line or 0, col or 0)


def _terminal_text(name: str) -> str:
    if name in _TERMINAL_TEXT:
        return _TERMINAL_TEXT[name]
    try:
        pattern = _parser().get_terminal(name).pattern
    except (KeyError, AttributeError):
        return name
    if pattern.type == "str":
        return repr(pattern.value)
    return name.lower()


def _expected(names) -> str:
    texts = sorted({_terminal_text(n) for n in names})
    if len(texts) > 8:
        texts = texts[:8] + ["..."]
    return ", ".join(texts)


def _lark_error(e: UnexpectedInput, file: str, source: str) -> CompLLError:
    comment = _unterminated_comment(source)
    at = getattr(e, "pos_in_stream", None)
    at = len(source) if at is None or at < 0 else at  # the end of file has no position of its own
    if comment is not None and at >= comment[0]:
        # the lexer read "/*" as '/' and '*' (or as nothing at all): say what the user left open
        _, line, col = comment
        return CompLLError("unterminated comment", file, line, col, "a '/*' comment ends with '*/'")
    if isinstance(e, UnexpectedCharacters):
        ch = source[e.pos_in_stream] if 0 <= e.pos_in_stream < len(source) else "?"
        hint = "strings are only allowed in require(...)" if ch in "\"'" else ""
        return CompLLError(f"unexpected character {ch!r}", file, e.line, e.column, hint)
    if isinstance(e, UnexpectedEOF) or (isinstance(e, UnexpectedToken) and e.token.type == "$END"):
        lines = source.split("\n")
        return CompLLError(
            f"unexpected end of file, expected {_expected(getattr(e, 'expected', []))}",
            file,
            len(lines),
            len(lines[-1]) + 1,
            "a '}' or ';' may be missing",
        )
    if isinstance(e, UnexpectedToken):
        tok = e.token
        return CompLLError(
            f"unexpected {str(tok)!r}, expected {_expected(e.expected)}",
            file,
            tok.line or 0,
            tok.column or 0,
            _in_width(e, source) or _missing_semicolon(e) or _misspelled_keyword(e, source)
            or _capture(e) or _c_habit(e, source),
        )
    return CompLLError(f"syntax error: {e}", file, getattr(e, "line", 0) or 0, getattr(e, "column", 0) or 0)


def _missing_semicolon(e: UnexpectedToken) -> str:
    """The hint for the most common slip: a statement's ';' left out at the end of a line.

    The parser only notices at the next line's first token, so the message points there; the hint
    names the line where the ';' belongs.
    """
    history = getattr(e, "token_history", None) or []
    if "SEMICOLON" not in e.expected or not history:
        return ""
    prev = history[-1]
    end_line = getattr(prev, "end_line", None) or getattr(prev, "line", None)
    if end_line and e.token.line and end_line < e.token.line:
        return f"a ';' may be missing at the end of line {end_line}"
    return ""


def _in_width(e: UnexpectedToken, source: str) -> str:
    """The hint for an operator a ``uint<...>`` width takes only in parentheses (``uint<(b << 1)>``).

    A width is an additive expression (``uint<bitwidth + 1>``): a shift, comparison or logical
    operator at its top level would make the closing ``>`` ambiguous. The parser is inside a width
    while ``uint`` and ``<`` wait on its stack (a finished ``uint<...>`` is reduced to a type). A
    comparison ``>`` is not an error there: it closes the width, and what follows it is
    (``uint<b > 1 ? 2 : 4>``), so the token before the error is looked at too.
    """
    state = getattr(getattr(e, "interactive_parser", None), "parser_state", None)
    stack = [getattr(v, "type", None) for v in getattr(state, "value_stack", ())]
    fix = "a uint<...> width takes + - * / % as they are; write uint<(expr)> with parentheses for"
    if any(a == "UINT" and b == "LESSTHAN" for a, b in zip(stack, stack[1:], strict=False)):
        return f"{fix} {str(e.token)!r}"
    history = getattr(e, "token_history", None) or []
    prev = history[-1] if history else None
    at = getattr(prev, "start_pos", None)
    if prev is not None and str(prev) == ">" and at is not None and _OPEN_WIDTH.search(source, 0, at):
        return f"the '>' at column {prev.column} closed the width; {fix} a comparison or ?:"
    return ""


def _capture(e: UnexpectedToken) -> str:
    """The hint for a C++ capture other than ``[&]`` (``[=]``, ``[]``, ``[x]``): the only one a lambda takes."""
    if set(e.expected) == {"AMPERSAND"}:
        return "a lambda is written [&](...) -> type { ... }: it reads the function's variables by reference"
    return ""


_LOOP = re.compile(r"\s*(?:\}\s*)?(?:(?:for|while)\s*\(|do\s*\{)")  # a C loop's head (not a variable 'for')
_CONST = re.compile(r"\bconst\s+(?:bool|int|uint\w*|float|double)\b")
_LAMBDA = "lambda_func name = [&](...) -> type { ... }"


def _c_habit(e: UnexpectedToken, source: str) -> str:
    """The hint for C or C++ the language does not have: loops, ``++``/``--``, ``const``, a lambda
    written in place (``map(v, [&](...) ...)``) or without its return type.

    Each lexes as names and operators, so the parser stops at a later token (``for (int i = 0;``
    fails at ``i``, ``n++;`` at ``;``) with an 'expected' list that does not say what to write.
    """
    tok = e.token
    at = getattr(tok, "start_pos", None)
    if at is None or at < 0:
        return ""
    start = source.rfind("\n", 0, at) + 1
    before = source[start:at]
    if _LOOP.match(before) or (before.strip() == "do" and str(tok) == "{"):
        return "CompLL has no loops: write the repetition as map, reduce or scan over range(n), see LANGUAGE.md"
    if before.rstrip().endswith(("++", "--")):
        op = before.rstrip()[-1]
        return f"CompLL has no {op}{op}: write x = x {op} 1"
    if _CONST.search(source, start, at + len(str(tok))):
        return "CompLL has no const: drop it (an encoder reads its gradient and never writes it)"
    if str(tok) == "[" and "AMPERSAND" not in e.expected:
        return f"a lambda is declared first, as {_LAMBDA}, and passed by its name"
    if [_terminal_text(n) for n in e.expected] == ["'->'"]:
        return "a lambda names its return type: [&](float x) -> float { ... }"
    return ""


#: The grammar's keywords (type names, ``if``, ``lambda_func``...), read from the grammar itself.
KEYWORDS = tuple(sorted(set(re.findall(r'"([A-Za-z_][A-Za-z0-9_]*)"', GRAMMAR))))
_WORD = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")


def _misspelled_keyword(e: UnexpectedToken, source: str) -> str:
    """The hint for a misspelled keyword (``lamda_func``, ``retrun``, ``flaot``, ``esle``, ``unit8``).

    Such a word lexes as a name, so the parser reports the token after it (``unexpected 'u_greater'``),
    which does not tell the user what to fix. The suspects are the words of the error's line up to
    and including the unexpected token, nearest first, that are no keyword, sound like one and occur
    once in the whole spec: a variable is declared and used, so it occurs at least twice and is not
    taken for a typo. The unexpected token itself, where the parser expects a keyword that it sounds
    like (``-> flaot``), is a typo however often it occurs.
    """
    tok = e.token
    if tok.type == "NAME":
        expected = [k for k in KEYWORDS if k.upper() in e.expected]
        meant = suggestion(str(tok), expected, VERY_CLOSE)
        if meant:
            return f"did you mean {meant!r}?"
    at = getattr(tok, "start_pos", None)
    if at is None or at < 0:
        return ""
    start = source.rfind("\n", 0, at) + 1
    for m in reversed(list(_WORD.finditer(source, start, at + len(str(tok))))):
        word = m.group()
        if word in KEYWORDS or len(re.findall(rf"\b{word}\b", source)) != 1:
            continue
        meant = suggestion(word, KEYWORDS, VERY_CLOSE)
        if meant:
            return f"{word!r} at column {m.start() - start + 1} is not a keyword: did you mean {meant!r}?"
    return ""


_OPEN_WIDTH = re.compile(r"\buint\s*<[^<>;{}]*$")  # a ``uint<`` whose width the next ``>`` closes


def _unterminated_comment(source: str) -> tuple[int, int, int] | None:
    """Offset, line and column of a ``/*`` never closed, or None.

    A scan that knows strings and ``//`` comments, so that a ``"/*"`` in a require message or a
    ``// see /*`` is not taken for a comment's start.
    """
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        if c == '"':
            i += 1
            while i < n and source[i] not in '"\n':
                i += 2 if source[i] == "\\" else 1
            i += 1
        elif source.startswith("//", i):
            end = source.find("\n", i)
            i = n if end < 0 else end
        elif source.startswith("/*", i):
            end = source.find("*/", i + 2)
            if end < 0:
                line = source.count("\n", 0, i) + 1
                return i, line, i - (source.rfind("\n", 0, i) + 1) + 1
            i = end + 2
        else:
            i += 1
    return None


# Rules of expressions in the lark tree: a depth error points at the start of the outermost one.
_EXPR_RULES = frozenset(
    "logic_or logic_and bit_or bit_xor bit_and equality relational shift additive mult cond_expr neg cast "
    "index member call random_call int_lit float_lit true_lit false_lit name".split()
)


def _check_depth(tree: Tree, file: str) -> None:
    """A CompLLError where statements nest deeper than ``PARSE_STMT_DEPTH`` levels of syntax tree, or an
    expression deeper than ``PARSE_DEPTH`` (walked without recursion).

    Turning the tree into ``ast`` nodes recurses once per level, so a 5000-term sum would otherwise
    end in a RecursionError that knows no position. The bounds are above anything the checker
    accepts (an expression at its limit at the end of an ``else if`` chain at its limit included), so
    this only speaks first for specs refused anyway. The position is the start of the outermost
    expression on the too deep path (where the checker's nesting errors point too), or the statement
    where the limit is passed when statements nest that deep.
    """
    stack: list[tuple[Tree, int, int, ast.Pos | None, ast.Pos]] = [(tree, 1, 0, None, ast.Pos(0, 0))]
    while stack:
        node, depth, stmt_depth, expr_start, where = stack.pop()  # stmt_depth: the levels above an expression
        if not node.meta.empty:
            where = _pos(node.meta)
        if expr_start is None and node.data in _EXPR_RULES:
            expr_start, stmt_depth = where, depth - 1
        if expr_start is None and depth > PARSE_STMT_DEPTH:
            message = (
                f"statements nested more than {PARSE_STMT_DEPTH} levels deep; if statements at most {MAX_BLOCKS}, "
                f"an else if chain at most {MAX_CHAIN} tests"
            )
            raise CompLLError(message, file, where.line, where.col, too_deep_hint())
        if expr_start is not None and depth - stmt_depth > PARSE_DEPTH:
            # the checker's words, for what it would count past MAX_DEPTH too
            message = f"expression is more than {PARSE_DEPTH} operations deep; at most {MAX_DEPTH}"
            raise CompLLError(message, file, expr_start.line, expr_start.col, too_deep_hint())
        stack.extend((c, depth + 1, stmt_depth, expr_start, where) for c in node.children if isinstance(c, Tree))


def parse(source: str, file: str = "<spec>") -> ast.Spec:
    """Parse a spec; raises ``CompLLError`` (never anything else) on bad input."""
    if not isinstance(source, str):
        raise CompLLError(f"spec source must be text, got {type(source).__name__}", file)
    if len(source) > MAX_SOURCE:
        raise CompLLError(f"spec is {len(source)} characters, more than the {MAX_SOURCE} allowed", file)
    if "\x00" in source:
        line = source[: source.index("\x00")].count("\n") + 1
        raise CompLLError("NUL character in spec", file, line, 1, "is this a binary file?")
    try:
        tree = _parser().parse(source)
    except UnexpectedInput as e:
        raise _lark_error(e, file, source) from None
    except LarkError as e:  # pragma: no cover - lark's other errors are grammar bugs
        raise CompLLError(f"syntax error: {e}", file) from None
    _check_depth(tree, file)
    try:
        top = _ToAst(file).transform(tree)
    except VisitError as e:
        if isinstance(e.orig_exc, CompLLError):
            raise e.orig_exc from None
        if isinstance(e.orig_exc, RecursionError):
            raise _too_deep(file) from None
        raise
    except RecursionError:
        raise _too_deep(file) from None
    blocks = [t for t in top if isinstance(t, ast.ParamBlock)]
    funcs = [t for t in top if isinstance(t, ast.Function)]
    return ast.Spec(ast.Pos(1, 1), file, source, blocks, funcs)


def _flat(items) -> list:
    """Statements, a multi-name declaration's list spliced in place."""
    out: list = []
    for it in items:
        if isinstance(it, list):
            out.extend(it)
        else:
            out.append(it)
    return out


def _too_deep(file: str) -> CompLLError:
    """A last resort (``_check_depth`` refuses deep trees first): a RecursionError has no position."""
    return CompLLError("nested too deeply", file, hint=too_deep_hint())


def _num(tok: Token, file: str) -> ast.Num:
    text = str(tok)
    pos = _pos(tok)
    # a refused literal of thousands of digits is named by its start and length, not printed whole
    shown = text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"
    if tok.type == "INT_LIT":
        hexa = text[:2].lower() == "0x"
        digits = (text[2:] if hexa else text).lstrip("0")
        # 2**63 has 19 decimal or 16 hex digits: a longer literal never fits, and int() would refuse
        # one of more than 4300 decimal digits with a ValueError of its own (a traceback, no position)
        if len(digits) > (16 if hexa else 19) or int(digits or "0", 16 if hexa else 10) >= 1 << 63:
            raise CompLLError(f"integer literal {shown} does not fit in 64 bits", file, pos.line, pos.col)
        return ast.Num(pos, int(digits or "0", 16 if hexa else 10), False, text)
    body = text[:-1] if text[-1] in "fF" else text
    value = float(body)
    if not math.isfinite(value):
        raise CompLLError(f"number {shown} is out of range", file, pos.line, pos.col)
    return ast.Num(pos, value, True, text)


def _unescape(tok: Token, file: str) -> str:
    raw = str(tok)[1:-1]
    out = []
    i = 0
    simple = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'", "0": "\0"}
    while i < len(raw):
        c = raw[i]
        if c == "\\" and i + 1 < len(raw):
            nxt = raw[i + 1]
            if nxt not in simple:
                pos = _pos(tok)
                raise CompLLError(f"unknown escape \\{nxt} in string", file, pos.line, pos.col + i + 1)
            out.append(simple[nxt])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


@v_args(meta=True)
class _ToAst(Transformer):
    """lark parse tree -> ``ast`` nodes."""

    def __init__(self, file: str) -> None:
        super().__init__()
        self.file = file

    # -- top level
    def start(self, meta, items):
        return items

    def param_block(self, meta, items):
        name, *rest = items
        fields = [x for x in rest if isinstance(x, ast.ParamField)]
        reqs = [x for x in rest if isinstance(x, ast.Require)]
        return ast.ParamBlock(_pos(meta), str(name), fields, reqs)

    def param_field(self, meta, items):
        ty, name, default = items
        return ast.ParamField(_pos(meta), ty, str(name), default)

    def function(self, meta, items):
        ret, name, *rest = items
        body = rest[-1]
        params = [p for p in rest[:-1] if p is not None]
        return ast.Function(_pos(meta), ret, str(name), params, body)

    def fparam(self, meta, items):
        ty, name = items
        return ast.Param(_pos(meta), ty, str(name))

    def struct_param(self, meta, items):
        tyname, name = items
        return ast.Param(_pos(meta), ast.TypeName(_pos(tyname), str(tyname)), str(name))

    lparam = fparam

    # -- types
    def type(self, meta, items):
        base, star = items
        base.pointer = star is not None
        base.pos = _pos(meta)
        return base

    def scalar_type(self, meta, items):
        return ast.TypeName(_pos(meta), str(items[0]))

    def uint_type(self, meta, items):
        return ast.TypeName(_pos(meta), "uint")

    def code_width(self, meta, items):
        return ast.TypeName(_pos(meta), "uint", width=items[0])

    # -- statements
    def block(self, meta, items):
        return ast.Block(_pos(meta), _flat(items))

    def declarator(self, meta, items):
        name, init = items
        return name, init

    def decl(self, meta, items):
        """``float min, max;`` (HiPress's style) declares each name in turn, as in C."""
        ty, *decls = items
        out = [ast.VarDecl(_pos(name), ty, str(name), init) for name, init in decls]
        out[0].pos = _pos(meta)
        return out[0] if len(out) == 1 else out

    def assign(self, meta, items):
        target, op, value = items
        return ast.Assign(_pos(meta), target, str(op), value)

    def expr_stmt(self, meta, items):
        return ast.ExprStmt(_pos(meta), items[0])

    def if_stmt(self, meta, items):
        cond, then, *other = items
        other = [ast.Block(_pos(meta), o) if isinstance(o, list) else o for o in other]
        if isinstance(then, list):
            then = ast.Block(_pos(meta), then)
        return ast.If(_pos(meta), cond, then, other[0] if other else None)

    def return_stmt(self, meta, items):
        return ast.Return(_pos(meta), items[0])

    def require_stmt(self, meta, items):
        cond, msg = items
        return ast.Require(_pos(meta), cond, _unescape(msg, self.file))

    def lambda_def(self, meta, items):
        name, *rest = items
        body = rest[-1]
        ret = rest[-2]
        params = [p for p in rest[:-2] if p is not None]
        return ast.LambdaDef(_pos(meta), str(name), params, ret, body)

    # -- expressions
    def _binary(self, meta, items):
        left, op, right = items
        return ast.Binary(_pos(meta), str(op), left, right)

    logic_or = logic_and = bit_or = bit_xor = bit_and = equality = relational = shift = additive = mult = _binary

    def cond_expr(self, meta, items):
        c, a, b = items
        return ast.Ternary(_pos(meta), c, a, b)

    def neg(self, meta, items):
        op, operand = items
        if str(op) == "+":
            return operand
        if str(op) == "-" and isinstance(operand, ast.Num):
            # fold "-literal" so that -99999 is one literal (its type follows the context)
            n = operand
            return ast.Num(_pos(meta), -n.value, n.is_float, "-" + n.text)
        return ast.Unary(_pos(meta), str(op), operand)

    def cast(self, meta, items):
        ty, operand = items
        return ast.Cast(_pos(meta), ty, operand)

    def index(self, meta, items):
        base, idx = items
        return ast.Index(_pos(meta), base, idx)

    def member(self, meta, items):
        base, name = items
        return ast.Member(_pos(meta), base, str(name))

    def call(self, meta, items):
        name, *args = items
        return ast.Call(_pos(meta), str(name), [a for a in args if a is not None])

    def random_call(self, meta, items):
        targ, *args = items
        return ast.Call(_pos(meta), "random", [a for a in args if a is not None], targ)

    def int_lit(self, meta, items):
        return _num(items[0], self.file)

    float_lit = int_lit

    def true_lit(self, meta, items):
        return ast.BoolLit(_pos(meta), True)

    def false_lit(self, meta, items):
        return ast.BoolLit(_pos(meta), False)

    def name(self, meta, items):
        return ast.Name(_pos(meta), str(items[0]))

    def __default__(self, data, children, meta):  # pragma: no cover - every rule is handled
        raise CompLLError(f"internal: unhandled grammar rule {data}", self.file, *(_pos(meta).line, _pos(meta).col))


__all__ = ["parse", "Tree"]
