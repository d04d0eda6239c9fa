"""sqlglot dialect: Spark plus Flink windowing TVFs (FLIP-145) and Spark 4's WATERMARK clause;
it prints the aggregates kept under retraction (sql/multiset.py) as batch SQL."""

from __future__ import annotations

from typing import Any, List, Optional

from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.generators.spark import SparkGenerator
from sqlglot.parsers.spark import SparkParser
from sqlglot.tokens import Token, TokenType

from .errors import record_positions
from .multiset import RETRACTED, Retracted

TVF_NAMES = frozenset({"TUMBLE", "HOP", "CUMULATE", "SESSION"})


class WindowTVF(exp.Expression):
    """``TABLE(TUMBLE(TABLE t, DESCRIPTOR(c), INTERVAL ...)) [AS alias]`` in FROM / JOIN position.

    ``this`` is the function name (Var, upper case); ``expressions`` the arguments, where
    ``TABLE t`` is an ``exp.Table``, ``DESCRIPTOR(c)`` an ``exp.Anonymous`` and a named
    argument an ``exp.Kwarg``.
    """

    arg_types = {
        "this": True,
        "expressions": False,
        "alias": False,
        "joins": False,
        "pivots": False,
    }

    @property
    def function(self) -> str:
        """Upper-case TVF name, e.g. 'TUMBLE'."""
        return self.this.name.upper()


class PartitionedTable(exp.Expression):
    """``TABLE t PARTITION BY k`` / ``TABLE t PARTITION BY (k1, k2)``: a SESSION TVF's DATA
    argument.

    ``this`` is the ``exp.Table``; ``expressions`` the partition keys as written.
    """

    arg_types = {"this": True, "expressions": True}


class WatermarkedTable(exp.Expression):
    """``<table> WATERMARK <column> DELAY OF <interval>`` (Spark 4 SQL watermark clause)."""

    arg_types = {"this": True, "column": True, "delay": True}


# Tokens after which a STREAM following SELECT is a column (``SELECT stream, x``, ``stream AS s``,
# ``stream + 1``), not Calcite's keyword (``SELECT STREAM *``, ``SELECT STREAM a, b``).
_CONTINUES_COLUMN = frozenset(
    {
        TokenType.COMMA,
        TokenType.FROM,
        TokenType.ALIAS,
        TokenType.DOT,
        TokenType.L_PAREN,
        TokenType.R_PAREN,
        TokenType.L_BRACKET,
        TokenType.SEMICOLON,
        TokenType.NOT,
        *SparkParser.FACTOR,
        *SparkParser.TERM,
        *SparkParser.COMPARISON,
        *SparkParser.EQUALITY,
        *SparkParser.BITWISE,
        *SparkParser.CONJUNCTION,
        *SparkParser.DISJUNCTION,
        *SparkParser.RANGE_PARSERS,
        *SparkParser.COLUMN_OPERATORS,
    }
)


def _is_stream_keyword(tokens: List[Token], i: int) -> bool:
    """Whether ``tokens[i]`` is Calcite's ``SELECT STREAM`` keyword (directly after SELECT and
    followed by the first projection), rather than a column named stream."""
    tok = tokens[i]
    if not (
        tok.token_type == TokenType.VAR
        and tok.text.upper() == "STREAM"
        and i > 0
        and tokens[i - 1].token_type == TokenType.SELECT
        and i + 1 < len(tokens)
    ):
        return False
    following = tokens[i + 1].token_type
    if following == TokenType.STAR:  # STREAM * FROM, or stream * 2
        after = tokens[i + 2].token_type if i + 2 < len(tokens) else None
        return after in (None, TokenType.FROM, TokenType.COMMA)
    return following not in _CONTINUES_COLUMN


def _calcite_windows(tokens: List[Token]) -> List[Token]:
    """Calcite's window syntax in the standard's order, token by token: ``OVER w (RANGE ...)``
    (a named window refined) as ``OVER (w RANGE ...)``, and a window specification with its
    ORDER BY before its PARTITION BY (``WINDOW w AS (ORDER BY t PARTITION BY k)``) with them
    swapped. Tokens keep their positions in the SQL, so errors still point at the text."""
    out = list(tokens)
    for i in range(len(out) - 2):
        if (
            out[i].token_type == TokenType.OVER
            and out[i + 1].token_type == TokenType.VAR
            and out[i + 2].token_type == TokenType.L_PAREN
        ):
            out[i + 1], out[i + 2] = out[i + 2], out[i + 1]
    for i, tok in enumerate(out):
        if tok.token_type != TokenType.L_PAREN:
            continue
        start = i + 1 + (i + 1 < len(out) and out[i + 1].token_type == TokenType.VAR)
        if start >= len(out) or out[start].token_type != TokenType.ORDER_BY:
            continue
        depth, partition, end = 0, None, None
        for j in range(start, len(out)):
            kind = out[j].token_type
            depth += (kind == TokenType.L_PAREN) - (kind == TokenType.R_PAREN)
            if depth < 0 or (depth == 0 and kind in (TokenType.ROWS, TokenType.RANGE)):
                end = j
                break
            if depth == 0 and kind == TokenType.PARTITION_BY and partition is None:
                partition = j
        if partition is not None and end is not None:
            out[start:end] = out[partition:end] + out[start:partition]
    return out


def _is_watermark_keyword(token: Any) -> bool:
    return (
        token is not None
        and token.token_type == TokenType.VAR
        and token.text.upper() == "WATERMARK"
    )


class SparkStreamingParser(SparkParser):
    """Spark parser that also understands window TVFs and the WATERMARK clause, and records
    where each node is in the SQL (errors.py: SqlError positions)."""

    def parse(self, raw_tokens: List[Token], sql: str) -> List[Optional[exp.Expr]]:
        # Calcite's SELECT STREAM: a streaming model's query is a stream already (a no-op).
        raw_tokens = [t for i, t in enumerate(raw_tokens) if not _is_stream_keyword(raw_tokens, i)]
        raw_tokens = _calcite_windows(raw_tokens)
        for tok, following in zip(raw_tokens, raw_tokens[1:], strict=False):
            if tok.token_type == TokenType.SESSION and following.token_type == TokenType.L_PAREN:
                tok.token_type = TokenType.VAR  # SESSION(ts, gap): a group window, a function
        trees = super().parse(raw_tokens, sql)
        for tree in trees:
            if tree is not None:
                record_positions(tree, sql)
        return trees

    def _tvf_ahead(self) -> bool:
        toks = self._tokens
        i = self._index
        return (
            i + 3 < len(toks)
            and toks[i].token_type == TokenType.TABLE
            and toks[i + 1].token_type == TokenType.L_PAREN
            and toks[i + 2].text.upper() in TVF_NAMES
            and toks[i + 3].token_type == TokenType.L_PAREN
        )

    def _parse_table_alias(self, *args: Any, **kwargs: Any) -> Optional[exp.TableAlias]:
        if _is_watermark_keyword(self._curr):
            return None
        return super()._parse_table_alias(*args, **kwargs)

    def _parse_table(self, *args: Any, **kwargs: Any) -> Optional[exp.Expr]:
        schema = kwargs.get("schema") or (args[0] if args else False)
        if not schema and not kwargs.get("is_db_reference") and self._tvf_ahead():
            return self._parse_window_tvf(kwargs.get("alias_tokens"))
        table = super()._parse_table(*args, **kwargs)
        if isinstance(table, exp.Table) and _is_watermark_keyword(self._curr):
            self._advance()
            column = self._parse_column()
            if column is not None and self._match(TokenType.ALIAS):  # <expression> AS <name>
                column = self.expression(exp.Alias(this=column, alias=self._parse_id_var()))
            if not self._match_text_seq("DELAY", "OF"):
                self.raise_error("Expected DELAY OF after WATERMARK <column>")
            delay = self._parse_interval()
            table = self.expression(WatermarkedTable(this=table, column=column, delay=delay))
        return table

    def _parse_tvf_arg(self) -> Optional[exp.Expr]:
        name: Optional[str] = None
        if self._next is not None and self._next.token_type == TokenType.FARROW:
            name = self._curr.text.upper()
            self._advance(2)
        if self._match(TokenType.TABLE):
            value: Optional[exp.Expr] = self._parse_table_parts()
            if self._match(TokenType.PARTITION_BY):
                if self._match(TokenType.L_PAREN):
                    keys = self._parse_csv(self._parse_assignment)
                    self._match_r_paren()
                else:
                    key = self._parse_assignment()
                    keys = [key] if key is not None else []  # none: PartitionedTable refuses it
                value = self.expression(PartitionedTable(this=value, expressions=keys))
        else:
            value = self._parse_assignment()
        if value is None:
            self.raise_error("Expected a window TVF argument")
        if name is not None:
            return self.expression(exp.Kwarg(this=exp.var(name), expression=value))
        return value

    def _parse_window_tvf(self, alias_tokens: Any = None) -> WindowTVF:
        self._advance()  # TABLE
        self._match_l_paren()
        name_token = self._curr
        self._advance()
        self._match_l_paren()
        args: List[exp.Expr] = []
        if not self._match(TokenType.R_PAREN, advance=False):
            while True:
                arg = self._parse_tvf_arg()
                if arg is not None:
                    args.append(arg)
                if not self._match(TokenType.COMMA):
                    break
        self._match_r_paren()
        self._match_r_paren()
        func = exp.var(name_token.text.upper())
        func.meta.update(line=name_token.line, col=name_token.col, start=name_token.start)
        node = WindowTVF(this=func, expressions=args)
        alias = self._parse_table_alias(alias_tokens=alias_tokens or self.TABLE_ALIAS_TOKENS)
        if alias:
            node.set("alias", alias)
        return node


def _tvf_arg_sql(gen: SparkGenerator, arg: exp.Expr) -> str:
    if isinstance(arg, exp.Kwarg):
        return f"{gen.sql(arg, 'this')} => {_tvf_arg_sql(gen, arg.expression)}"
    if isinstance(arg, exp.Table):
        return f"TABLE {gen.sql(arg)}"
    if isinstance(arg, PartitionedTable):
        return f"TABLE {gen.sql(arg, 'this')} PARTITION BY ({gen.expressions(arg, flat=True)})"
    return gen.sql(arg)


def _window_tvf_sql(gen: SparkGenerator, node: WindowTVF) -> str:
    args = ", ".join(_tvf_arg_sql(gen, a) for a in node.expressions)
    alias = gen.sql(node, "alias")
    return f"TABLE({node.function}({args}))" + (f" AS {alias}" if alias else "")


def _watermarked_sql(gen: SparkGenerator, node: WatermarkedTable) -> str:
    return (
        f"{gen.sql(node, 'this')} WATERMARK {gen.sql(node, 'column')} "
        f"DELAY OF {gen.sql(node, 'delay')}"
    )


def _floor_sql(gen: SparkGenerator, node: exp.Floor) -> str:
    """Calcite's ``FLOOR(ts TO HOUR)`` as Spark's ``DATE_TRUNC('HOUR', ts)`` (Spark cannot parse
    the TO form); a numeric FLOOR as usual."""
    unit = node.args.get("to")
    if unit is None:
        return gen.function_fallback_sql(node)
    return f"DATE_TRUNC('{unit.name.upper()}', {gen.sql(node, 'this')})"


def _ceil_sql(gen: SparkGenerator, node: exp.Ceil) -> str:
    """Calcite's ``CEIL(ts TO HOUR)``: ``ts`` itself if it is on the hour, else the next hour."""
    unit = node.args.get("to")
    if unit is None:
        return gen.function_fallback_sql(node)
    value = gen.sql(node, "this")
    name = unit.name.upper()
    floor = f"DATE_TRUNC('{name}', {value})"
    return f"CASE WHEN {floor} = {value} THEN {value} ELSE {floor} + INTERVAL 1 {name} END"


def _retracted_sql(gen: SparkGenerator, node: Retracted) -> str:
    return gen.sql(node.oracle())


class SparkStreamingGenerator(SparkGenerator):
    """Spark generator that can print window TVFs (for messages) and WATERMARK clauses, and
    Calcite's FLOOR / CEIL (ts TO unit) in Spark's terms."""

    TRANSFORMS = {
        **SparkGenerator.TRANSFORMS,
        WindowTVF: _window_tvf_sql,
        WatermarkedTable: _watermarked_sql,
        exp.Floor: _floor_sql,
        exp.Ceil: _ceil_sql,
        **{kind: _retracted_sql for kind in RETRACTED},
    }


class SparkStreaming(Spark):
    """The dbt-spark-streaming SQL dialect (Spark + FLIP-145 window TVFs + WATERMARK)."""

    Parser = SparkStreamingParser
    Generator = SparkStreamingGenerator
