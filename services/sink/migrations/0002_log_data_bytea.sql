-- Log data as bytes (the chunk's UTF-8): a text column cannot hold a NUL, and a log
-- line may carry any character a job printed.
ALTER TABLE log_chunks ALTER COLUMN data TYPE bytea USING convert_to(data, 'UTF8');
