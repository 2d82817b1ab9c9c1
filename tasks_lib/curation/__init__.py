"""Curation: a season's stages from crawl to packaged instances, the leak gate, and releasing a committed
corpus."""
