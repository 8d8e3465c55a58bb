"""A page's structure: layout regions, tables' cells, reading order by regions (docs/architecture.md)."""
