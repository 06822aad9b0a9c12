"""The backend: API gateway, queue, workers, storage, recommendations, dashboard."""
