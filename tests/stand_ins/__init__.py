"""Local stand-ins for services that cannot be reached from tests (GitHub)."""
