-- Durable turns (issue 29): what the next holder of a session needs to
-- resume the turn a holder left running (it paused it for a hand-off, died,
-- or lost its lease): the id of the connection that sent the prompt, the
-- seq of the turn's first history entry, the turn's id, and the lease epoch
-- that recorded it. An acquisition no longer clears the turn: the new
-- holder reads it (store.TurnKeeper.PriorTurn) and records or clears it;
-- List shows a turn only while the epoch that recorded it holds a live
-- lease. A turn recorded before this migration has no epoch: the
-- acquisition that finds it gives it the epoch it had.
ALTER TABLE iac_sessions
    ADD COLUMN turn_conn      text,
    ADD COLUMN turn_first_seq bigint,
    ADD COLUMN turn_id        text,
    ADD COLUMN turn_epoch     bigint;
