"""The Brain store: an HTTP server keeping each user's brain as one archive."""
