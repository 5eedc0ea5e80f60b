-- GET /v1/events (services/api/events.py): every stored job event gets its position in
-- one sequence, assigned when the sink inserts it. One sink writes a schema and commits
-- its batches one after the other, so a reader that has seen position N has seen every
-- committed event below N: the position is a resumable cursor (the SSE id).
ALTER TABLE job_events ADD COLUMN stream_position bigserial;
CREATE UNIQUE INDEX job_events_stream_position ON job_events (stream_position);
