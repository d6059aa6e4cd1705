"""The CompLL grammar (lark, LALR(1)): C-like functions, lambdas and compression operators.

LALR rather than Earley because specs are small but the fuzzing tests feed thousands of mutated
ones, and LALR gives a linear-time parser with one unambiguous tree or a precise error position.
Two C ambiguities are settled in the grammar itself: type names are keywords (so ``(float) x`` is a
cast and ``uint<b>`` a type, never a comparison), and a dangling ``else`` binds to the nearest ``if``
(lark resolves that shift/reduce conflict by shifting, as C does).

A ``uint<...>`` width is an additive expression (``uint<bitwidth + 1>``, ``uint<2 * p.bits>``): with
no shift, comparison or logical operator at its top level, its ``>`` always closes it (those go in
parentheses, ``uint<(b << 1)>``, as the parser's hint says). The lexer reads the ``>>`` of
``random<uint<b>>`` as one token after a width's last name or number (LALR shares that state with
expressions, where ``>>`` is a shift), so ``random`` also takes ``>>`` as the two closing brackets,
as C++11 does: the checker then says which types ``random`` draws, as it did before widths took sums.
"""

GRAMMAR = r"""
start: _top*

_top: param_block | function

param_block: "param" NAME "{" _param_item* "}" ";"?
_param_item: param_field | require_stmt
param_field: type NAME ["=" expr] ";"

function: type NAME "(" [fparam ("," fparam)*] ")" block
fparam: type NAME
      | NAME NAME          -> struct_param

type: _base [STAR]
STAR: "*"
_base: scalar_type | code_type | uint_type
!scalar_type: "float" | "double" | "int" | "uint8" | "uint1" | "uint2" | "uint4" | "bool" | "void"
?code_type: code_width ">"
code_width: "uint" "<" additive
uint_type: "uint"

block: "{" _stmt* "}"
_stmt: decl ";"
     | assign ";"
     | expr_stmt
     | if_stmt
     | return_stmt
     | require_stmt
     | lambda_def
     | block

decl: type declarator ("," declarator)*
declarator: NAME ["=" expr]
!assign: postfix ("=" | "+=" | "-=" | "*=" | "/=" | "%=" | "&=" | "|=" | "^=" | "<<=" | ">>=") expr
expr_stmt: expr ";"
if_stmt: "if" "(" expr ")" _stmt ("else" _stmt)?
return_stmt: "return" [expr] ";"
require_stmt: "require" "(" expr "," STRING ")" ";"
lambda_def: "lambda_func" NAME "=" "[" "&" "]" "(" [lparam ("," lparam)*] ")" "->" type block ";"?
lparam: type NAME

?expr: ternary
?ternary: logic_or
        | logic_or "?" expr ":" ternary   -> cond_expr
!?logic_or: logic_and | logic_or "||" logic_and
!?logic_and: bit_or | logic_and "&&" bit_or
!?bit_or: bit_xor | bit_or "|" bit_xor
!?bit_xor: bit_and | bit_xor "^" bit_and
!?bit_and: equality | bit_and "&" equality
!?equality: relational | equality ("==" | "!=") relational
!?relational: shift | relational ("<" | ">" | "<=" | ">=") shift
!?shift: additive | shift ("<<" | ">>") additive
!?additive: mult | additive ("+" | "-") mult
!?mult: unary | mult ("*" | "/" | "%") unary
?unary: postfix
      | neg
      | cast
!neg: ("-" | "+" | "!" | "~") unary
cast: "(" type ")" unary
?postfix: primary
        | postfix "[" expr "]"                        -> index
        | postfix "." NAME                            -> member
        | NAME "(" [expr ("," expr)*] ")"             -> call
        | "random" "<" type ">" "(" [expr ("," expr)*] ")"  -> random_call
        | "random" "<" code_width ">>" "(" [expr ("," expr)*] ")"  -> random_call
?primary: INT_LIT    -> int_lit
        | FLOAT_LIT  -> float_lit
        | "true"     -> true_lit
        | "false"    -> false_lit
        | NAME       -> name
        | "(" expr ")"

NAME: /[A-Za-z_][A-Za-z0-9_]*/
INT_LIT: /0[xX][0-9a-fA-F]+|[0-9]+/
FLOAT_LIT: /([0-9]+\.[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[fF]?|[0-9]+[eE][+-]?[0-9]+[fF]?|[0-9]+[fF]/
STRING: /"([^"\\\n]|\\.)*"/

COMMENT: /\/\/[^\n]*/
BLOCK_COMMENT: /\/\*(.|\n)*?\*\//
%ignore COMMENT
%ignore BLOCK_COMMENT
%ignore /[ \t\r\n\f]+/
"""
