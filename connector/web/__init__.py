"""The connector's sign-in page: plain HTML and CSS shipped as package data."""
