"""The static dashboard: data.py queries the store, pages.py turns it into HTML, build.py writes the folder."""
