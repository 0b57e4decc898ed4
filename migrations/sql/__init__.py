"""SQL that Alembic cannot autogenerate (triggers, views, roles), as of the revision that creates it.

A later revision that changes one of these adds a new module rather than editing this one, so that
every revision keeps building the schema it built when it was written.
"""
