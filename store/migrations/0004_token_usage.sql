-- Token usage per principal, model and UTC day (issue 31): token budgets
-- read a principal's day and month from it before every model call, and
-- `iac-code usage` sums it. Each model call adds to its row with one upsert.
CREATE TABLE iac_token_usage (
    principal           text   NOT NULL,
    day                 date   NOT NULL,
    model               text   NOT NULL,
    calls               bigint NOT NULL DEFAULT 0,
    input_tokens        bigint NOT NULL DEFAULT 0,
    output_tokens       bigint NOT NULL DEFAULT 0,
    thought_tokens      bigint NOT NULL DEFAULT 0,
    cached_read_tokens  bigint NOT NULL DEFAULT 0,
    cached_write_tokens bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (principal, day, model)
);
CREATE INDEX iac_token_usage_day ON iac_token_usage (day);
