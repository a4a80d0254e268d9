"""`railab ui`: a local web view of running labs (layout, live link loads, controls).

layout.py draws the fabric (pure), live.py turns counter snapshots into what the page
shows (pure), validate.py checks write requests (pure), runs.py starts and stops
experiments as `railab run` processes, server.py is the aiohttp application, static/
holds every asset the page loads (nothing comes from a CDN)."""
