-- The shared limit on the model (issue 31, IAC_CODE_MODEL_CONCURRENCY):
-- every model request of a provider key, on every pod, queues here.
-- A row waits (running = false) until iac_model_gate_step lets it run;
-- at most the limit run per key. The next to run is the waiting request of
-- the person served least recently (iac_model_served), first come first
-- within a person, so one busy person cannot starve the others. Rows
-- expire unless their process renews them, so a pod killed mid-request
-- gives its slots back. A pause (a provider's 429 Retry-After) holds every
-- request of its key until it ends.
CREATE TABLE iac_model_queue (
    ticket  bigserial   PRIMARY KEY,
    key     text        NOT NULL,
    person  text        NOT NULL,
    holder  text        NOT NULL,
    running boolean     NOT NULL DEFAULT false,
    expires timestamptz NOT NULL
);
CREATE INDEX iac_model_queue_key ON iac_model_queue (key, running, ticket);
CREATE INDEX iac_model_queue_holder ON iac_model_queue (holder);

CREATE TABLE iac_model_served (
    key        text        NOT NULL,
    person     text        NOT NULL,
    last_start timestamptz NOT NULL,
    PRIMARY KEY (key, person)
);

CREATE TABLE iac_model_pauses (
    key   text        PRIMARY KEY,
    until timestamptz NOT NULL
);

-- iac_model_gate_step drops expired rows of p_key and lets waiting ones run
-- while fewer than p_limit run and the key is not paused; then it reports
-- on p_ticket: its state ('running', 'waiting' or 'gone'), the requests
-- ahead of it (running and waiting with a smaller ticket) and the pause.
-- Serialised per key by a transaction-level advisory lock.
CREATE FUNCTION iac_model_gate_step(p_key text, p_ticket bigint, p_limit integer, p_ttl interval)
RETURNS TABLE (state text, ahead integer, paused_until timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    n_running integer;
    pause     timestamptz;
    next_t    bigint;
    next_p    text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('iac-code model gate ' || p_key));
    DELETE FROM iac_model_queue q WHERE q.key = p_key AND q.expires < now();
    SELECT p.until INTO pause FROM iac_model_pauses p WHERE p.key = p_key AND p.until > now();
    IF pause IS NULL THEN
        SELECT count(*) INTO n_running FROM iac_model_queue q WHERE q.key = p_key AND q.running;
        WHILE n_running < p_limit LOOP
            SELECT q.ticket, q.person INTO next_t, next_p
              FROM iac_model_queue q
              LEFT JOIN iac_model_served s ON s.key = q.key AND s.person = q.person
             WHERE q.key = p_key AND NOT q.running
             ORDER BY s.last_start NULLS FIRST, q.ticket
             LIMIT 1;
            EXIT WHEN next_t IS NULL;
            UPDATE iac_model_queue q SET running = true, expires = now() + p_ttl WHERE q.ticket = next_t;
            INSERT INTO iac_model_served AS s (key, person, last_start) VALUES (p_key, next_p, clock_timestamp())
                ON CONFLICT (key, person) DO UPDATE SET last_start = clock_timestamp();
            n_running := n_running + 1;
            next_t := NULL;
        END LOOP;
    END IF;
    RETURN QUERY SELECT
        coalesce((SELECT CASE WHEN q.running THEN 'running' ELSE 'waiting' END
                    FROM iac_model_queue q WHERE q.ticket = p_ticket), 'gone'),
        (SELECT count(*)::integer FROM iac_model_queue q WHERE q.key = p_key AND (q.running OR q.ticket < p_ticket)
            AND q.ticket <> p_ticket),
        pause;
END $$;
