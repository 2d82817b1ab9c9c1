"""Pure readers and writers of what tools produce: unified diffs, JUnit XML, Playwright reports, JSON with
comments, lock files, changed tests, the evidence channel."""
