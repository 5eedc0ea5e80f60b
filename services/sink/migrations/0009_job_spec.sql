-- The spec stored once (docs/architecture.md, "The spec, stored once"): a job's spec is
-- the one of its JobSubmitted, kept in its jobs row; the view no longer carries it (nor
-- does any AttemptScheduled). A view stored before it did: its spec moves here.
ALTER TABLE jobs ADD COLUMN spec jsonb;
UPDATE jobs SET spec = view -> 'spec' WHERE jsonb_typeof(view -> 'spec') = 'object';
