-- Sessions left idle end on their own (R-4.3): the session sweep looks for active sessions
-- untouched for longer than the idle time, across tenants, every few minutes.
CREATE INDEX IF NOT EXISTS sessions_active_idle ON sessions (updated_at) WHERE status = 'active';
