"""Judging: predictions checked, each scored through the engine, verdicts cached, runs and their reports."""
