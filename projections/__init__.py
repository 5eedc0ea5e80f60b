"""gridledger's pure core: reducers and deciders over a job's events.

No Kafka, Postgres, Docker, clock or randomness: time comes from events, so the
live processors and the replay tool compute the same answers.
"""
