"""What is computed from stored results: power-law fits (`fits`) and the gain analysis of
exported weights (`gamma`)."""
