"""Prefect flows: wiring of the stages in tasks_lib, parameters and artifacts. No business logic here."""
