"""Foundations every stage stands on: settings, fixed names, errors, paths, limits, stop requests (imports
nothing of the project above it)."""
