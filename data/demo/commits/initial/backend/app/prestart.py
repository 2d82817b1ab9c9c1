"""Run before the app or the tests: `python -m app.prestart`.

Waits until the database accepts connections (retrying for a few seconds), then creates the tables.
Exits non-zero when the database never comes up or the tables cannot be created.
"""

import logging
import sys
import time

from sqlalchemy import text

from app.db import engine, init_db

logger = logging.getLogger("app.prestart")

MAX_TRIES = 30
WAIT_SECONDS = 1.0


def wait_for_db() -> None:
    for attempt in range(1, MAX_TRIES + 1):
        try:
            with engine.connect() as connection:
                connection.execute(text("SELECT 1"))
        except Exception as exc:
            if attempt == MAX_TRIES:
                raise
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            logger.warning("database not ready (try %d/%d): %s", attempt, MAX_TRIES, first_line)
            time.sleep(WAIT_SECONDS)
        else:
            logger.info("database is up")
            return


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        wait_for_db()
        init_db()
    except Exception as exc:
        logger.error("prestart failed: %s", exc)
        return 1
    logger.info("tables created")
    return 0


if __name__ == "__main__":
    sys.exit(main())
