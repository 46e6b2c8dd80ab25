"""``jet console``: a small read-mostly web console (its own process, no build step, no CDN:
the page, script and styles are shipped in ``static/``)."""
