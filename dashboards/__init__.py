"""Plotly figures from stored sweep results, the live dashboard page and server, and
static plot export. Reads only what `sweeper` stores (`sweeper.records.store`) and fits.
"""
