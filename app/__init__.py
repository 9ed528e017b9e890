"""MAGIS Studio's Dash app: a thin view over ``core`` (see app/main.py)."""
