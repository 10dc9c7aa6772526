"""The model (editable by patches)."""
