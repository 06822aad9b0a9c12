"""The web dashboard: static pages served by the backend, charts drawn in the browser with Chart.js
(shipped in `static/vendor/`, so the page works offline), data from the `/api/v1` endpoints."""

from __future__ import annotations

from pathlib import Path

STATIC = Path(__file__).with_name("static")
