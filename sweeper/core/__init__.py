"""The leaf of the sweeper: value types every layer reads, importing nothing else of the project.

- `errors`: `UserError` (a problem the user can fix: one line each, exit code 2);
- `ids`: cell and point ids and size labels (`CellId`, `PointId`, every parse of an id);
- `states`: `PointState`, `CellStatus`;
- `grid`: a cell's LR search values (`GridPoint`, `LRPolicy`, `CellDecision`);
- `rows`: `PointRow`, `CellRow`, `CurvePoint`, `CellFacts` and the store's columns.

Standard library only.
"""
