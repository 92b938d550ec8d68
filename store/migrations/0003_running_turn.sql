-- The turn running in a session (issue 22): its start and the JSON-RPC id of
-- its session/prompt request, recorded by the lease holder at the turn's
-- start and cleared at its end, by every release and by every acquisition.
-- List shows it only while the lease is live, so a holder killed mid-turn
-- stops showing a turn once its lease expires or it is declared dead.
-- turn_prompt_request is json, not jsonb: the id's bytes as the client sent
-- them (see iac_history). Not indexed: setting it leaves room for a HOT
-- update.
ALTER TABLE iac_sessions
    ADD COLUMN turn_started_at     timestamptz,
    ADD COLUMN turn_prompt_request json;
