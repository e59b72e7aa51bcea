"""What every page of the connector shares: the sign-in page (plain HTML and CSS shipped as package
data) and the pages' languages (`i18n`: catalogs, locale choice, dates and numbers)."""
