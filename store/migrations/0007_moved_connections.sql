-- HTTP connections moved off a draining pod (issue 29): a connection id
-- names the incarnation that answered its initialize, and an id of a dead
-- incarnation is otherwise answered 400 at once. A row says which
-- incarnation serves the connection now; every pod reads it (and caches it)
-- when the id's own incarnation is gone. The row goes when the connection
-- closes, or when the incarnation serving it is dead.
CREATE TABLE iac_moved_connections (
    conn_id     text PRIMARY KEY,
    incarnation text NOT NULL,
    moved_at    timestamptz NOT NULL DEFAULT now()
);
