"""The web app at ``/app``: a person's brain in the browser (see docs/webapp.md)."""
