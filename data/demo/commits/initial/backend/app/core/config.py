"""Settings of the app, read from the environment (no .env file, no pydantic-settings)."""

import os

from sqlalchemy.engine import URL


class Settings:
    API_V1_STR = "/api/v1"

    def __init__(self) -> None:
        self.PROJECT_NAME = os.environ.get("PROJECT_NAME", "demo")
        self.POSTGRES_SERVER = os.environ.get("POSTGRES_SERVER", "localhost")
        self.POSTGRES_PORT = int(os.environ.get("POSTGRES_PORT", "5432"))
        self.POSTGRES_USER = os.environ.get("POSTGRES_USER", "postgres")
        self.POSTGRES_PASSWORD = os.environ.get("POSTGRES_PASSWORD", "")
        self.POSTGRES_DB = os.environ.get("POSTGRES_DB", "app")

    @property
    def SQLALCHEMY_DATABASE_URI(self) -> URL:
        """A postgresql+psycopg:// URL; URL.create quotes special characters of the password."""
        return URL.create(
            "postgresql+psycopg",
            username=self.POSTGRES_USER,
            password=self.POSTGRES_PASSWORD or None,
            host=self.POSTGRES_SERVER,
            port=self.POSTGRES_PORT,
            database=self.POSTGRES_DB,
        )


settings = Settings()
