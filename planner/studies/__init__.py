"""Fleet studies: many scenarios solved as one question (`plan sweep`, `plan compare`).

- `study`: the study file (`{study, base, grid}`), its cases (the grid's product applied to the base by
  dotted paths) and each case's content hash; bad input is an InputError located in the study file.
- `runner`: runs cases in a local process pool or on Ray (one task per case), resumable: a case whose
  hash has a result under `DIR/cases/` is not solved again.
- `tables`: results.csv / results.parquet / summary.json / plots of a sweep.
- `compare`: fronts of one scenario on several systems and sizes, side by side.
"""
