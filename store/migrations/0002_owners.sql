-- Sessions belong to a principal (issue 20). Sessions stored before owners
-- belong to "default" (the principal of stdio and of the shared HTTP
-- token): the column's default fills them in, and their meta says so too.
ALTER TABLE iac_sessions ADD COLUMN owner text NOT NULL DEFAULT 'default';
UPDATE iac_sessions SET meta = (meta::jsonb || '{"owner": "default"}'::jsonb)::json
    WHERE meta->>'owner' IS NULL OR meta->>'owner' = '';

-- session/list pages one owner's sessions newest first.
CREATE INDEX iac_sessions_owner ON iac_sessions (owner, updated_at DESC, id);
