"""Pure domain: models, scopes and permissions, hashing, ranking, routing. No I/O here."""
