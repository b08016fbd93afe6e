"""Running a sweep on Ray Tune (`sweeper launch`): the launch script, the sweep directory, the
Tune session and its adapters, the cell book, the recorder, the live display."""
