"""URL-friendly slugs for item titles."""

from slugify import slugify

DEFAULT_MAX_LENGTH = 60


def slugify_title(title: str, max_length: int = DEFAULT_MAX_LENGTH) -> str:
    """Lowercase ASCII words joined by "-", cut at a word boundary to at most max_length characters."""
    return slugify(title, max_length=max_length, word_boundary=True)
