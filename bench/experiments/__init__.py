"""Measurements run once to decide a design (README.md); nothing in the product imports this package."""
