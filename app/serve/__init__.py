"""Assembling and deploying the Serve application, and the local Ray instance of `python -m app`."""
