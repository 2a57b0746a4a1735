"""The Spark SQL a spec's expressions may use (`transform` and join-side `where`/`select`).

Expressions are the user's code, run inside the driver's JVM: Spark functions such as
`reflect` call any Java method (`System.getenv` hands out the server's secrets), XML parsing
can read files through external entities, and a scalar subquery can read any table or file
(`parquet.`/path``). So a spec may call only Spark's built-in functions in `ALLOWED` (every
system function of Spark 4.0 except those in `DENIED`), unqualified, and may hold no
subquery. Checked twice: `check` at validation, on sqlglot's Spark tokens (no JVM in the
API, and it names the field), and `check_parsed` in the driver, on the tree Spark's own
parser builds, which is what runs (a lexing difference between the two cannot let a call
through). docs/pipelines.md lists the rule.
"""

from __future__ import annotations

from typing import Any

from sqlglot.dialects.spark import Spark
from sqlglot.errors import SqlglotError
from sqlglot.tokenizer_core import TokenType

DENIED: dict[str, str] = {
    **dict.fromkeys(
        ["java_method", "reflect", "try_reflect"],
        "calls any Java method (reads the environment, files, anything)",
    ),
    **dict.fromkeys(
        [
            "from_xml",
            "schema_of_xml",
            "xpath",
            "xpath_boolean",
            "xpath_double",
            "xpath_float",
            "xpath_int",
            "xpath_long",
            "xpath_number",
            "xpath_short",
            "xpath_string",
        ],
        "parses XML with the JVM's parser (external entities can read files)",
    ),
    **dict.fromkeys(["from_protobuf", "to_protobuf"], "reads a descriptor file from the host"),
    **dict.fromkeys(
        ["input_file_block_length", "input_file_block_start", "input_file_name"],
        "reveals the host's file paths",
    ),
    **dict.fromkeys(
        ["collations", "range", "sql_keywords"], "a table-valued function, not an expression"
    ),
}

ALLOWED: frozenset[str] = frozenset(
    """
    abs acos acosh add_months aes_decrypt aes_encrypt aggregate and any any_value
    approx_count_distinct approx_percentile array array_agg array_append array_compact
    array_contains array_distinct array_except array_insert array_intersect array_join
    array_max array_min array_position array_prepend array_remove array_repeat array_size
    array_sort array_union arrays_overlap arrays_zip ascii asin asinh assert_true atan atan2
    atanh avg base64 between bigint bin binary bit_and bit_count bit_get bit_length bit_or
    bit_xor bitmap_bit_position bitmap_bucket_number bitmap_construct_agg bitmap_count
    bitmap_or_agg bool_and bool_or boolean bround btrim cardinality case cast cbrt ceil
    ceiling char char_length character_length chr coalesce collate collation collect_list
    collect_set concat concat_ws contains conv convert_timezone corr cos cosh cot count
    count_if count_min_sketch covar_pop covar_samp crc32 csc cume_dist curdate
    current_catalog current_database current_date current_schema current_timestamp
    current_timezone current_user date date_add date_diff date_format date_from_unix_date date_part
    date_sub date_trunc dateadd datediff datepart day dayname dayofmonth dayofweek dayofyear
    decimal decode degrees dense_rank div double e element_at elt encode endswith equal_null
    every exists exp explode explode_outer expm1 extract factorial filter find_in_set first
    first_value flatten float floor forall format_number format_string from_avro from_csv
    from_json from_unixtime from_utc_timestamp get get_json_object getbit greatest grouping
    grouping_id hash hex histogram_numeric hll_sketch_agg hll_sketch_estimate hll_union
    hll_union_agg hour hypot if ifnull ilike in initcap inline inline_outer instr int
    is_valid_utf8 is_variant_null isnan isnotnull isnull json_array_length json_object_keys
    json_tuple kurtosis lag last last_day last_value lcase lead least left len length
    levenshtein like listagg ln localtimestamp locate log log10 log1p log2 lower lpad ltrim
    luhn_check make_date make_dt_interval make_interval make_timestamp make_timestamp_ltz
    make_timestamp_ntz make_valid_utf8 make_ym_interval map map_concat map_contains_key
    map_entries map_filter map_from_arrays map_from_entries map_keys map_values map_zip_with
    mask max max_by md5 mean median min min_by minute mod mode monotonically_increasing_id
    month monthname months_between named_struct nanvl negative next_day not now nth_value
    ntile nullif nullifzero nvl nvl2 octet_length or overlay parse_json parse_url
    percent_rank percentile percentile_approx percentile_cont percentile_disc pi pmod
    posexplode posexplode_outer position positive pow power printf quarter radians
    raise_error rand randn random randstr rank reduce regexp regexp_count regexp_extract
    regexp_extract_all regexp_instr regexp_like regexp_replace regexp_substr regr_avgx
    regr_avgy regr_count regr_intercept regr_r2 regr_slope regr_sxx regr_sxy regr_syy repeat
    replace reverse right rint rlike round row_number rpad rtrim schema_of_avro
    schema_of_csv schema_of_json schema_of_variant schema_of_variant_agg sec second
    sentences sequence session_user session_window sha sha1 sha2 shiftleft shiftright
    shiftrightunsigned
    shuffle sign signum sin sinh size skewness slice smallint some sort_array soundex space
    spark_partition_id split split_part sqrt stack startswith std stddev stddev_pop
    stddev_samp str_to_map string string_agg struct substr substring substring_index sum tan
    tanh timestamp timestamp_micros timestamp_millis timestamp_seconds tinyint to_avro
    to_binary to_char to_csv to_date to_json to_number to_timestamp to_timestamp_ltz
    to_timestamp_ntz to_unix_timestamp to_utc_timestamp to_varchar to_variant_object to_xml
    transform transform_keys transform_values translate trim trunc try_add try_aes_decrypt
    try_avg try_divide try_element_at try_make_interval try_make_timestamp
    try_make_timestamp_ltz try_make_timestamp_ntz try_mod try_multiply try_parse_json
    try_parse_url try_subtract try_sum try_to_binary try_to_number try_to_timestamp
    try_url_decode try_validate_utf8 try_variant_get typeof ucase unbase64 unhex uniform
    unix_date unix_micros unix_millis unix_seconds unix_timestamp upper url_decode
    url_encode user uuid validate_utf8 var_pop var_samp variance variant_explode
    variant_explode_outer variant_get version weekday weekofyear when width_bucket window
    window_time xxhash64 year zeroifnull zip_with
    """.split()  # noqa: SIM905 (a list literal of 440 names would be 440 lines)
)

# Words a call-like "(" can follow that are grammar, not functions: `x IN (...)`, `CAST(x AS
# DECIMAL(10, 2))`, `FILTER (WHERE ...)`, ...
_GRAMMAR_WORDS = (
    "in and or not when then else between like ilike rlike regexp is over filter distinct "
    "all any some as decimal dec numeric varchar char character interval by partition order "
    "within group respect ignore nulls"
)
_GRAMMAR = frozenset(_GRAMMAR_WORDS.split())
# Words that start a query inside an expression (a scalar subquery, an inline table, a
# script transform).
_QUERY = frozenset({"select", "values", "table", "using", "with"})
_CALLABLE = {TokenType.VAR, TokenType.IDENTIFIER, TokenType.STRING}


class ExpressionError(ValueError):
    """An expression a spec may not hold; the message says why."""


def _refused(name: str) -> ExpressionError:
    why = DENIED.get(name)
    if why is not None:
        return ExpressionError(f"function {name!r} is not allowed: it {why}")
    return ExpressionError(
        f"function {name!r} is not one of Spark's built-in functions that specs may use "
        "(docs/pipelines.md, Expressions)"
    )


def check(text: str) -> None:
    """Raise ExpressionError if `text` calls a function outside `ALLOWED` or holds a query."""
    try:
        tokens = Spark().tokenize(text)
    except SqlglotError as e:
        raise ExpressionError(f"cannot read the expression: {e}") from None
    for i, tok in enumerate(tokens):
        word = tok.text.lower()
        if tok.token_type not in (TokenType.STRING, TokenType.IDENTIFIER) and word in _QUERY:
            raise ExpressionError(f"{tok.text!r}: subqueries are not allowed in expressions")
        called = i + 1 < len(tokens) and tokens[i + 1].token_type == TokenType.L_PAREN
        if not called or (word in _GRAMMAR and tok.token_type not in _CALLABLE):
            continue
        if i > 0 and tokens[i - 1].token_type == TokenType.DOT:
            raise ExpressionError(f"function {tok.text!r}: qualified functions are not allowed")
        if word not in ALLOWED and word not in _GRAMMAR:
            raise _refused(word)


def check_parsed(parser: Any, text: str) -> None:
    """`check` on the expression tree Spark's own parser makes of `text` (`parser`: the
    session's, `spark._jsparkSession.sessionState().sqlParser()`): every function it calls
    must be in `ALLOWED`, and it may hold no subquery."""
    todo = [parser.parseExpression(text)]
    while todo:
        node = todo.pop()
        kind = node.getClass().getSimpleName()
        if "Subquery" in kind or kind in ("ListQuery", "Exists", "LateralSubquery"):
            raise ExpressionError("subqueries are not allowed in expressions")
        if kind == "UnresolvedFunction":
            parts = node.nameParts()
            names = [str(parts.apply(j)) for j in range(parts.size())]
            if len(names) != 1:
                raise ExpressionError(
                    f"function {'.'.join(names)!r}: qualified functions are not allowed"
                )
            if names[0].lower() not in ALLOWED:
                raise _refused(names[0].lower())
        children = node.children()
        todo += [children.apply(j) for j in range(children.size())]


__all__ = ["ALLOWED", "DENIED", "ExpressionError", "check", "check_parsed"]
