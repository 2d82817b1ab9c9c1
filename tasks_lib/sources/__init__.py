"""What a source repository is: its record, its git, where its repository comes from, its test scope, and
where its merged PRs come from (crawl/)."""
