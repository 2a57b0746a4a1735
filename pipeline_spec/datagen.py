"""The columns of the generated streams (Spark SQL DDL): as the driver's data source makes
them, and as SQL pipelines read them. No imports: Spark's Python workers load it."""

DATAGEN_SCHEMAS: dict[str, str] = {
    "clicks": "ts timestamp, user string, page string, amount double",
    "nexmark": (
        "event_type string, ts timestamp, person_id bigint, name string, state string, "
        "auction_id bigint, seller bigint, category bigint, bidder bigint, price double"
    ),
}

__all__ = ["DATAGEN_SCHEMAS"]
