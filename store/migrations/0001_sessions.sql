-- Sessions, their history, their leases, and the process incarnations that
-- own leases.

-- One row per session. meta is the Meta JSON as written; cwd and updated_at
-- are copies for List. The lease (owner incarnation, epoch, expiry) lives on
-- the row: taking it bumps the epoch, releasing it clears the owner and keeps
-- the epoch, so an epoch is never reused. Renewals only touch lease_expires
-- (not indexed), which leaves room for HOT updates (fillfactor).
CREATE TABLE iac_sessions (
    id            text        PRIMARY KEY,
    cwd           text        NOT NULL,
    updated_at    timestamptz NOT NULL,
    meta          json        NOT NULL,
    lease_owner   text,
    lease_epoch   bigint      NOT NULL DEFAULT 0,
    lease_expires timestamptz
) WITH (fillfactor = 80);

-- List pages newest first by (updated_at, id), all sessions or one cwd's.
CREATE INDEX iac_sessions_updated ON iac_sessions (updated_at DESC, id);
CREATE INDEX iac_sessions_cwd ON iac_sessions (cwd, updated_at DESC, id);
-- Renewal and release of one incarnation's leases.
CREATE INDEX iac_sessions_lease_owner ON iac_sessions (lease_owner) WHERE lease_owner IS NOT NULL;

-- One row per history entry. entry is json, not jsonb: json keeps the bytes
-- as written (jsonb reorders keys and drops duplicates and whitespace), so
-- thinking signatures and tool inputs come back verbatim.
CREATE TABLE iac_history (
    session_id text   NOT NULL REFERENCES iac_sessions (id) ON DELETE CASCADE,
    seq        bigint NOT NULL,
    entry      json   NOT NULL,
    PRIMARY KEY (session_id, seq)
);

-- Process incarnations (pods) of a cluster: the advertised address other
-- pods reach them at, and whether they were declared dead (their leases can
-- then be taken at once).
CREATE TABLE iac_incarnations (
    id           text        PRIMARY KEY,
    addr         text        NOT NULL,
    started_at   timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    dead_at      timestamptz
);
