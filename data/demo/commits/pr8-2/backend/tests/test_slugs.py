"""Tests of the slug helper."""

from app.slugs import slugify_title


def test_slugify_title_joins_lowercase_words() -> None:
    assert slugify_title("Buy Milk Today!") == "buy-milk-today"


def test_slugify_title_transliterates_accents() -> None:
    assert slugify_title("Crème Brûlée") == "creme-brulee"


def test_slugify_title_cuts_at_a_word_boundary() -> None:
    assert slugify_title("the quick brown fox jumps", max_length=15) == "the-quick-brown"
