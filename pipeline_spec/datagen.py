"""The columns of the generated streams (Spark SQL DDL): as the driver's data source makes
them, and as SQL pipelines read them. No imports: Spark's Python workers load it."""

DATAGEN_SCHEMAS: dict[str, str] = {
    "clicks": "ts timestamp, user string, page string, amount double",
    # Nexmark's person, auction and bid in one row each (workers/runtime/nexmark.py): event_type
    # 0, 1, 2; the kind's columns under its prefix, the others NULL.
    "nexmark": (
        "event_type int, person_id bigint, person_name string, person_email_address string, "
        "person_credit_card string, person_city string, person_state string, auction_id bigint, "
        "auction_item_name string, auction_description string, auction_initial_bid bigint, "
        "auction_reserve bigint, auction_expires timestamp, auction_seller bigint, "
        "auction_category bigint, bid_auction bigint, bid_bidder bigint, bid_price bigint, "
        "bid_channel string, bid_url string, date_time timestamp, extra string"
    ),
}

__all__ = ["DATAGEN_SCHEMAS"]
