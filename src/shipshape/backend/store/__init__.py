"""Storage: SQLAlchemy models, Alembic migrations, and the repository (the only module with SQL)."""
