"""The `pbench` command line (cli/pbench.py): the composition root, above flows and the library."""
