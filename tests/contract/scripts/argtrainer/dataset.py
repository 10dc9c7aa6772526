"""Data loading (frozen)."""
