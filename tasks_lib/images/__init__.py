"""Docker images of the harness: the bootstrapped base, Postgres, environment images by lock hash, their
lineage and their build network."""
