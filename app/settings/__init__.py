"""Each part's own settings, which `app/config.py` puts together into the one settings object.

The bottom of the layers (docs/architecture.md): these modules import nothing of the service but
`app.errors`, so any part may read its own settings without reaching into another part.
"""
