"""The product's contract: the task instance, its schema, its contamination tier, loading a corpus and the
SWE-bench interchange."""
