"""Stage 1 (crawl): merged PRs from GitHub, a local git mirror or an export file, as one normalized table."""
